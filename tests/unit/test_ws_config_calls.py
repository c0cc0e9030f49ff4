"""WebSocket config (ws_upstreams defaults, validation) and the I/O-free call helpers."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.ws import calls as C


def test_ws_upstreams_default_to_the_http_upstreams_with_ws_schemes() -> None:
    cfg = config_from_dict(
        {"networks": {"bsc": {"upstreams": ["https://a.example/x?k=1", "http://b:8545"]}}}
    )
    assert cfg.network("bsc").ws_upstreams == ("wss://a.example/x?k=1", "ws://b:8545")


def test_ws_upstreams_explicit_and_from_env() -> None:
    cfg = config_from_dict({"networks": {"bsc": {"ws_upstreams": ["wss://n.example/ws"]}}})
    assert cfg.network("bsc").ws_upstreams == ("wss://n.example/ws",)
    cfg = config_from_dict({}, env={"GATEWAY_WS_UPSTREAM_OPBNB": "ws://x:1, ws://y:2"})
    assert cfg.network("opbnb").ws_upstreams == ("ws://x:1", "ws://y:2")


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"networks": {"bsc": {"ws_upstreams": ["http://x"]}}}, "networks.bsc.ws_upstreams[0]"),
        ({"networks": {"bsc": {"ws_upstreams": []}}}, "networks.bsc.ws_upstreams"),
        ({"ws": {"charge_interval_s": 0}}, "ws.charge_interval_s"),
        ({"ws": {"recheck_interval_s": 0}}, "ws.recheck_interval_s"),
        ({"ws": {"send_queue_bytes": 10}}, "ws.send_queue_bytes"),
        ({"ws": {"bogus": 1}}, "ws.bogus"),
        ({"plans": {"free": {"ws_max_sockets": -1}}}, "plans.free.ws_max_sockets"),
    ],
)
def test_bad_ws_config_names_its_path(raw: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError, match=path.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict(raw)


def test_plan_ws_caps() -> None:
    cfg = config_from_dict({"plans": {"payg": {"ws_max_sockets": 7, "ws_max_subscriptions": 3}}})
    assert (cfg.plan("payg").ws_max_sockets, cfg.plan("payg").ws_max_subscriptions) == (7, 3)
    assert cfg.plan("free").ws_max_sockets == 0  # the [ws] default applies


def test_logs_filters_have_one_canonical_form() -> None:
    a = "0x" + "ab" * 20
    t = "0x" + "cd" * 32
    one = C.subscribe_params(["logs", {"address": a.upper().replace("0X", "0x"), "topics": [t]}])
    two = C.subscribe_params(
        ["logs", {"topics": [t.upper().replace("0X", "0x"), None], "address": a}]
    )
    assert not isinstance(one, str) and not isinstance(two, str)
    assert one == two
    assert one[1] == ["logs", {"address": a, "topics": [t]}]
    listed = C.subscribe_params(["logs", {"address": [a, a.upper().replace("0X", "0x")]}])
    assert not isinstance(listed, str) and listed[1][1] == {"address": [a]}


def test_a_logs_filter_is_read_as_the_node_reads_it() -> None:
    """Member names fold as Go folds them, the last wins, unknown ones are
    ignored (never forwarded), and "latest" ends are geth's own new-logs case."""
    a, b = "0x" + "ab" * 20, "0x" + "cd" * 20
    t = "0x" + "ef" * 32
    plain = C.subscribe_params(["logs", {"address": b, "topics": [t]}])
    folded = C.subscribe_params(
        ["logs", {"Address": a, "ADDRESS": b, "Topics": [t], "fromBlock": "latest", "x": 1}]
    )
    assert not isinstance(plain, str) and folded == plain
    assert plain[1] == ["logs", {"address": b, "topics": [t]}]
    whole = C.subscribe_params(["logs", None])  # Go: null is the empty filter
    assert not isinstance(whole, str) and whole[1] == ["logs", {}]
    assert C.subscribe_params(["logs", {"address": "0x12"}]) == (
        "invalid address: hex has invalid length 1 after decoding; expected 20 for address"
    )
    assert "fromBlock" in str(C.subscribe_params(["logs", {"FROMBLOCK": "0x1"}]))


@pytest.mark.parametrize(
    "params",
    [
        [],
        ["syncing"],
        ["newHeads", {"x": 1}],
        ["logs", {"fromBlock": "0x1"}],
        ["logs", {"address": "0x12"}],
        ["logs", {"topics": [1]}],
        ["logs", {"topics": [None] * 5}],
        ["logs", {}, {}],
    ],
)
def test_bad_subscribe_params_have_a_reason(params: list[object]) -> None:
    assert isinstance(C.subscribe_params(params), str)
