"""The Redis layout is a contract with admit.lua and with data already stored: pin it."""

from __future__ import annotations

from gateway.redis import keyspace as ks


def test_per_key_names_share_one_hash_tag() -> None:
    names = [
        ks.record_key("p", "H"),
        ks.bucket_key("p", "H"),
        ks.usage_hour("p", "H", 7),
        ks.usage_day("p", "H", 9),
        ks.insight_slot("p", "H", 1),
        ks.insight_hour("p", "H", 2),
        ks.insight_log("p", "H"),
    ]
    assert names == [
        "p:{H}:k",
        "p:{H}:k",
        "p:{H}:h:7",
        "p:{H}:d:9",
        "p:{H}:q:f:1",
        "p:{H}:q:h:2",
        "p:{H}:q:log",
    ]
    assert all(n.startswith(ks.key_tag("p", "H")) for n in names)
    assert ks.usage_day("p", "H", 9) == ks.key_tag("p", "H") + "d:9"


def test_account_and_dashboard_names() -> None:
    assert ks.account("p", "a1") == "p:a:{a1}"
    assert ks.account_keys("p", "a1") == "p:a:{a1}:keys"
    assert ks.account_working("p", "a1") == "p:a:{a1}:kw"
    assert ks.account_lock("p", "a1") == "p:a:{a1}:lock"
    assert ks.account_sessions("p", "a1") == "p:a:{a1}:sess"
    assert ks.account_recovery("p", "a1") == "p:a:{a1}:rc"
    assert ks.email("p", "x@y.z") == "p:e:x@y.z"
    assert ks.key_index("p", "key_1") == "p:i:key_1"
    assert ks.session("p", "S") == "p:s:S"
    assert ks.pending_login("p", "S") == "p:l:S"
    assert ks.reset_token("p", "S") == "p:r:S"
    assert ks.counter("p", "n") == "p:t:n"
    assert ks.login_counter("p", "n") == "p:t:{login}:n"
    assert ks.keys_channel("p") == "p:keys"
