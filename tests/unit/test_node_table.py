"""The node table: upstreams as URLs or tables, method routes, and what the pool makes of them."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cli.configcheck import check
from gateway.config import ConfigError, MethodRoute, NodeConfig, config_from_dict, node_table
from gateway.intel.head import HeadReport
from gateway.rpc.logsparts import learn, refusal_text
from gateway.upstream.eligible import Route, holds_state
from gateway.upstream.pool import NodePool


def _bsc(**table: Any) -> dict[str, Any]:
    return {"networks": {"bsc": table}}


def test_both_forms_load_with_names_and_defaults() -> None:
    cfg = config_from_dict(
        _bsc(
            upstreams=[
                "https://full.example/rpc",
                {
                    "url": "https://arch.example",
                    "name": "archive-1",
                    "ws_url": "wss://arch.example/ws",
                    "archive": True,
                    "max_logs_range": 5000,
                    "groups": ["trace"],
                },
                {"url": "http://pruned.example", "state_blocks": 90_000},
            ],
            extra_methods={"debug_trace*": {"weight": 500, "group": "trace", "timeout_s": 60}},
        )
    )
    bsc = cfg.network("bsc")
    assert bsc.upstreams == (
        "https://full.example/rpc",
        "https://arch.example",
        "http://pruned.example",
    )
    assert node_table(bsc) == (
        NodeConfig("https://full.example/rpc", "bsc-0"),
        NodeConfig(
            "https://arch.example",
            "archive-1",
            "wss://arch.example/ws",
            True,
            128,
            5000,
            ("trace",),
        ),
        NodeConfig("http://pruned.example", "bsc-2", state_blocks=90_000),
    )
    assert bsc.ws_upstreams == (
        "wss://full.example/rpc",
        "wss://arch.example/ws",
        "ws://pruned.example",
    )
    assert dict(bsc.routes) == {"debug_trace*": MethodRoute("trace", 60.0)}
    assert cfg.plan("free").cost("debug_traceTransaction") == 500
    assert "debug_traceCall" in bsc.methods


@pytest.mark.parametrize(
    ("upstreams", "extra", "message"),
    [
        ([{"name": "x"}], None, "networks.bsc.upstreams[0].url: missing"),
        (["ftp://x"], None, "networks.bsc.upstreams[0]: not an http(s) URL"),
        ([42], None, "networks.bsc.upstreams[0]: expected an http(s) URL or a node table"),
        (
            [{"url": "http://a", "nmae": "x"}],
            None,
            "networks.bsc.upstreams[0].nmae: unknown config key",
        ),
        (
            [{"url": "http://a", "name": "https://a.example/KEY"}],
            None,
            "upstreams[0].name: expected a short name",
        ),
        ([{"url": "http://a", "name": "cache"}], None, "upstreams[0].name: 'cache' is reserved"),
        (
            ["http://a", {"url": "http://b", "name": "bsc-0"}],
            None,
            "upstreams[1].name: 'bsc-0' is also",
        ),
        (
            [{"url": "http://a", "state_blocks": 0}],
            None,
            "upstreams[0].state_blocks: expected a positive",
        ),
        (
            [{"url": "http://a", "archive": "yes"}],
            None,
            "upstreams[0].archive: expected true or false",
        ),
        ([{"url": "http://a", "max_logs_range": -1}], None, "upstreams[0].max_logs_range"),
        ([{"url": "http://a", "groups": "trace"}], None, "upstreams[0].groups: expected a list"),
        ([{"url": "http://a", "ws_url": "http://a"}], None, "upstreams[0].ws_url: not a ws(s) URL"),
        (
            ["http://a"],
            {"debug_trace*": {"weight": 5, "group": "trace"}},
            "networks.bsc.extra_methods.debug_trace*.group: no node of networks.bsc.upstreams",
        ),
        (
            ["http://a"],
            {"debug_trace*": {"weight": 5, "timeout_s": "60"}},
            "networks.bsc.extra_methods.debug_trace*.timeout_s: expected a positive number",
        ),
        (
            ["http://a"],
            {"trace_*": {"wieght": 5}},
            "networks.bsc.extra_methods.trace_*.wieght: unknown",
        ),
    ],
)
def test_mistakes_name_their_path(upstreams: list[Any], extra: Any, message: str) -> None:
    table: dict[str, Any] = {"upstreams": upstreams}
    if extra is not None:
        table["extra_methods"] = extra
    with pytest.raises(ConfigError) as caught:
        config_from_dict(_bsc(**table))
    assert message in str(caught.value)


def test_config_check_lists_every_node_table_mistake(tmp_path: Any) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        "[networks.bsc]\n"
        'upstreams = [{ url = "https://a.example", state_blocks = -5 }]\n'
        "[networks.opbnb]\n"
        'upstreams = [{ url = "https://b.example", name = "https://b.example" }]\n'
    )
    cfg, problems = check(str(path), env={})
    assert cfg is None
    assert any(p.startswith("networks.bsc.upstreams[0].state_blocks:") for p in problems)
    assert any(p.startswith("networks.opbnb.upstreams[0].name:") for p in problems)


def test_node_names_flow_into_the_pool_and_its_metrics() -> None:
    from gateway.telemetry.metrics import Metrics

    cfg = config_from_dict(
        _bsc(
            upstreams=[
                {"url": "http://a.example", "name": "fra-archive", "archive": True},
                "http://b.example",
            ]
        )
    )
    metrics = Metrics()
    pool = NodePool(cfg.network("bsc"), cfg.upstream, 1.0, 5.0, metrics=metrics, config=cfg)
    assert [n.name for n in pool.nodes] == ["fra-archive", "bsc-1"]
    assert pool.nodes[0].archive and not pool.nodes[1].archive
    pool.nodes[0].metrics.latency.observe(0.01)  # type: ignore[union-attr]
    text = metrics.exposition().decode()
    assert 'node="fra-archive"' in text and 'node="bsc-1"' in text
    assert "a.example" not in text


def test_history_and_groups_narrow_the_pick() -> None:
    cfg = config_from_dict(
        _bsc(
            upstreams=[
                {"url": "http://full.example", "name": "full", "state_blocks": 100},
                {
                    "url": "http://arch.example",
                    "name": "arch",
                    "archive": True,
                    "groups": ["trace"],
                },
            ],
            extra_methods={"debug_trace*": {"weight": 500, "group": "trace"}},
        )
    )
    pool = NodePool(cfg.network("bsc"), cfg.upstream, 1.0, 5.0, config=cfg)
    full, arch = pool.nodes
    for node in pool.nodes:
        node.healthy = node.verified = True
        node.head = 1_000
        pool.intel.heads.observe(node.name, HeadReport(1_000, "0x" + "ab" * 32))
    assert holds_state(full, 901, 1_000) and not holds_state(full, 900, 1_000)
    el = pool.eligibility
    old = el.route([("eth_getBalance", ["0x" + "11" * 20, hex(500)])], pool.nodes)
    assert old == Route(state_at=500)
    assert {pool.pick(route=old) for _ in range(4)} == {arch}
    recent = el.route([("eth_call", [{}, hex(950)])], pool.nodes)
    assert {pool.pick(route=recent) for _ in range(4)} == {full, arch}
    trace = el.route([("debug_traceTransaction", ["0x" + "22" * 32])], pool.nodes)
    assert trace.group == "trace" and {pool.pick(route=trace) for _ in range(4)} == {arch}
    # the head's hash is placed at the head's number; an unknown hash needs the archive
    at_head = el.route(
        [("eth_getCode", ["0x" + "11" * 20, {"blockHash": "0x" + "ab" * 32}])], pool.nodes
    )
    assert at_head.state_at in (-1, 1_000)
    unknown = el.route(
        [("eth_getCode", ["0x" + "11" * 20, {"blockHash": "0x" + "cd" * 32}])], pool.nodes
    )
    assert {pool.pick(route=unknown) for _ in range(4)} == {arch}
    el.saw_block("0x" + "cd" * 32, 990)
    known = el.route(
        [("eth_getCode", ["0x" + "11" * 20, {"blockHash": "0x" + "CD" * 32}])], pool.nodes
    )
    assert known.state_at == 990


@pytest.mark.parametrize(
    ("message", "span", "learnt"),
    [
        ("exceed maximum block range: 5000", 8000, 5000),  # geth, BSC
        ("query exceeds max block range 1000", 4000, 1000),  # erigon
        ("block range too large", 4000, 2000),
        ("eth_getLogs and eth_newFilter are limited to a 5 block range", 4000, 5),  # QuickNode
        ("eth_getLogs is limited to a 10,000 range", 40000, 10000),
        ("query returned more than 10000 results", 3000, 1500),
        (
            "Log response size exceeded. You can make eth_getLogs requests "
            "with up to a 2K block range",
            3000,
            1500,
        ),
    ],
)
def test_range_refusals_are_read_in_each_clients_words(
    message: str, span: int, learnt: int
) -> None:
    reply = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"%s"}}' % message.encode()
    text = refusal_text(reply)
    assert text is not None
    from gateway.upstream.node import Node

    node = Node("http://a.example", "a")
    learn(node, span, text)
    assert node.logs_limit == learnt


def test_other_errors_are_not_range_refusals() -> None:
    for message in ("invalid block range params", "execution reverted", "rate limited"):
        reply = (
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"%s"}}' % message.encode()
        )
        assert refusal_text(reply) is None
    assert refusal_text(b'{"jsonrpc":"2.0","id":1,"result":[]}') is None


def test_the_node_table_reaches_worker_processes() -> None:
    import orjson

    from gateway.server.workers import config_to_raw

    cfg = config_from_dict(
        _bsc(
            upstreams=[
                "http://a.example",
                {"url": "http://b.example", "name": "tracer", "archive": True, "groups": ["trace"]},
            ],
            extra_methods={"debug_trace*": {"weight": 90, "group": "trace", "timeout_s": 30}},
        )
    )
    again = config_from_dict(orjson.loads(orjson.dumps(config_to_raw(cfg))))
    assert again == cfg
    assert node_table(again.network("bsc"))[1].name == "tracer"


def test_bscs_own_reads_are_offered_on_bsc_with_their_weights() -> None:
    cfg = config_from_dict({})
    own = (
        "eth_getBlobSidecars",
        "eth_getBlobSidecarByTxHash",
        "eth_getTransactionsByBlockNumber",
        "eth_getTransactionDataAndReceipt",
    )
    for method in own:
        assert method in cfg.network("bsc").methods and method not in cfg.network("opbnb").methods
    free = cfg.plan("free")
    assert [free.cost(m) for m in own] == [1, 1, 1, 2]


def test_a_head_seen_while_serving_places_its_hash_later() -> None:
    cfg = config_from_dict(_bsc(upstreams=["http://a.example"]))
    pool = NodePool(cfg.network("bsc"), cfg.upstream, 1.0, 5.0, config=cfg)
    el = pool.eligibility
    pool.intel.heads.observe("bsc-0", HeadReport(500, "0x" + "01" * 32))
    el.route([("eth_chainId", [])], pool.nodes)  # any request sees the head
    pool.intel.heads.observe("bsc-0", HeadReport(501, "0x" + "02" * 32))
    el.route([("eth_chainId", [])], pool.nodes)
    params = ["0x" + "11" * 20, {"blockHash": "0x" + "01" * 32}]
    assert el.state_block("eth_getBalance", params, pool.nodes) == 500


def test_served_headers_of_requests_the_gateway_answered() -> None:
    from gateway.rpc import protocol as rpc
    from gateway.rpc.replies import ParsedRequest
    from gateway.rpc.served import served_headers

    def call(served: str = "", node: str = "") -> rpc.Call:
        return rpc.Call(method="eth_call", id=1, has_id=True, served=served, node=node)

    assert served_headers(ParsedRequest([], False)) == {
        "X-Gateway-Cache": "miss",
        "X-Gateway-Node": "gateway",
    }
    both = served_headers(ParsedRequest([call("hit", "cache"), call()], True))
    assert both == {"X-Gateway-Cache": "hit", "X-Gateway-Node": "cache,gateway"}
    split = served_headers(ParsedRequest([call("miss", "a,b")], False))
    assert split == {"X-Gateway-Cache": "miss", "X-Gateway-Node": "a,b"}
    mixed = served_headers(ParsedRequest([call("coalesced", "a"), call("miss", "b")], True))
    assert mixed == {"X-Gateway-Cache": "mixed", "X-Gateway-Node": "a,b"}


def test_log_ranges_go_to_nodes_that_take_them() -> None:
    from gateway.rpc.logsplit import LogSplitter

    cfg = config_from_dict(
        _bsc(
            upstreams=[
                {"url": "http://tiny.example", "name": "tiny", "max_logs_range": 5},
                {"url": "http://wide.example", "name": "wide", "max_logs_range": 2000},
                {"url": "http://any.example", "name": "any"},
            ]
        )
    )
    pool = NodePool(cfg.network("bsc"), cfg.upstream, 1.0, 5.0, config=cfg)
    tiny, wide, any_range = pool.nodes
    for node in pool.nodes:
        node.healthy = node.verified = True
    splitter = LogSplitter(pool, lambda n: 1, concurrency=4, timeout_s=5.0, max_bytes=1 << 20)
    assert splitter.limit() == 0  # "any" takes every range: nothing is split
    span = [{"fromBlock": hex(100), "toBlock": hex(1_099)}]  # 1,000 blocks
    route = pool.route([("eth_getLogs", span)])
    assert route.logs_span == 1_000
    assert {pool.pick(route=route) for _ in range(6)} == {wide, any_range}
    any_range.healthy = False
    assert splitter.limit() == 2_000  # chunks as wide as "wide" takes, never 5
    tiny.logs_limit = 0
    assert splitter.limit() == 0
