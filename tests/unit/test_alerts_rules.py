"""The alert rules' checks and conditions, the signature scheme, the backoff and the
address classes, as pure functions (no sockets)."""

from __future__ import annotations

import hashlib
import hmac
import math

import pytest

from gateway.alerts.delivery import MAX_BACKOFF_S, backoff_s
from gateway.alerts.rules import RuleRefused, checked_rule, counted, fires, value_of, window_start
from gateway.alerts.signing import header_value
from gateway.alerts.targets import TargetRefused, is_public, parse_url
from gateway.demo.alertsink import signature_ok as verify
from gateway.store.core import DAY_MS

NOW = 1_800_000_000_000


def test_rules_take_their_threshold_and_window() -> None:
    assert checked_rule("rate_limited", "50", None) == ("rate_limited", 50.0, 300)
    assert checked_rule("error_percent", 2.5, 600) == ("error_percent", 2.5, 600)
    assert checked_rule("quota_percent", 80, 5) == ("quota_percent", 80.0, 86_400)  # a day
    assert checked_rule("key_expiring_days", 7) == ("key_expiring_days", 7.0, 7 * 86_400)
    for rule, threshold, window in [
        ("nope", 1, None),
        ("quota_percent", 0, None),
        ("quota_percent", 101, None),
        ("error_percent", -1, None),
        ("key_expiring_days", 1.5, None),
        ("rate_limited", True, None),
        ("rate_limited", "nan", None),
        ("rate_limited", 5, 59),
        ("rate_limited", 5, 86_401),
        ("rate_limited", 5, 90.5),
        ("rate_limited", [], None),
    ]:
        with pytest.raises(RuleRefused):
            checked_rule(rule, threshold, window)


def test_windows_start_on_their_boundary_and_expiry_fires_once_per_date() -> None:
    assert window_start("rate_limited", 300, NOW + 299_999, math.inf) == NOW
    assert window_start("quota_percent", 86_400, NOW, math.inf) == NOW // DAY_MS * DAY_MS
    assert window_start("key_expiring_days", 86_400, NOW, NOW + DAY_MS) == NOW + DAY_MS


def test_counted_spans_midnight_and_never_goes_negative() -> None:
    base = {"100": {"lim": 7}, "101": {"lim": 0}}
    now = {"101": {"lim": 3}, "102": {"lim": 4}}  # a day later: day 100 left the reading
    assert counted(now, base, "lim") == 7
    assert counted({"100": {"lim": 10}, "101": {"lim": 2}}, base, "lim") == 5
    assert counted({"100": {"lim": 1}}, base, "lim") == 0


def _value(rule: str, **over: object) -> float | None:
    args: dict[str, object] = {
        "now_ms": NOW,
        "expires_ms": math.inf,
        "quota": 0,
        "today": {},
        "now": {},
        "base": {},
        "min_calls": 20,
    }
    args.update(over)
    return value_of(rule, **args)  # type: ignore[arg-type]


def test_conditions() -> None:
    assert _value("quota_percent", quota=200, today={"cu": 150}) == 75.0
    assert _value("quota_percent", quota=0, today={"cu": 150}) is None  # no quota: never
    assert _value("key_expiring_days", expires_ms=NOW + DAY_MS // 2) == 0.5
    assert (
        _value("key_expiring_days") is None and _value("key_expiring_days", expires_ms=NOW) is None
    )
    assert _value("rate_limited", now={"1": {"lim": 9}}, base={"1": {"lim": 2}}) == 7
    one_of_one = {"1": {"req": 1, "ans": 1}}
    assert _value("error_percent", now=one_of_one) is None  # 1 of 1 is not "100 %"
    errors = {"1": {"req": 40, "err": 3, "ans": 7}}
    assert _value("error_percent", now=errors, base={"1": {"req": 20}}) == 50.0
    assert fires("quota_percent", 80, 80) and not fires("quota_percent", 79.9, 80)
    assert fires("rate_limited", 6, 5) and not fires("rate_limited", 5, 5)  # more than N
    assert fires("key_expiring_days", 3, 3) and not fires("key_expiring_days", 3.1, 3)
    assert not fires("error_percent", None, 0)


def test_the_signature_is_stripes_scheme() -> None:
    body = b'{"id":"evt_1"}'
    header = header_value("whsec_x", body, timestamp=1_700_000_000)
    t, v1 = header.split(",")
    want = hmac.new(b"whsec_x", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert t == "t=1700000000" and v1 == "v1=" + want
    assert verify("whsec_x", header, body, now=1_700_000_100)
    assert not verify("whsec_x", header, body, now=1_700_000_301)  # older than 5 minutes
    assert not verify("whsec_y", header, body, now=1_700_000_000)
    assert not verify("whsec_x", header, body + b" ", now=1_700_000_000)
    assert not verify("whsec_x", "v1=" + want, body, now=1_700_000_000)


def test_backoff_doubles_up_to_an_hour() -> None:
    assert [backoff_s(30, n) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert backoff_s(30, 200) == MAX_BACKOFF_S


def test_address_classes() -> None:
    for public in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "1.1.1.1"):
        assert is_public(public), public
    for private in ("127.0.0.1", "10.0.0.1", "::1", "fe80::1%eth0", "::ffff:10.0.0.1", "224.0.0.1"):
        assert not is_public(private), private
    assert parse_url("https://example.com/x", False) == ("https", "example.com")
    assert parse_url("http://127.0.0.1:9/x", True) == ("http", "127.0.0.1")
    for bad in (
        "http://example.com/",
        "https://example.com:port/",
        "https://h/#frag",
        "https://é.com/",
    ):
        with pytest.raises(TargetRefused):
            parse_url(bad, False)
