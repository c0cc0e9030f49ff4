"""HeadTracker: per-node heads, a monotonic network head, reorg tags, routing by block."""

from __future__ import annotations

import orjson

from gateway.intel.head import HeadReport, HeadTracker, NetworkHead, parse_probe


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker() -> HeadTracker:
    return HeadTracker(["a", "b"], clock=Clock())


def test_network_head_never_goes_back_when_a_node_lags() -> None:
    t = tracker()
    assert t.observe("a", HeadReport(100, "0xaa", safe=99, finalized=98))
    assert not t.observe("b", HeadReport(90, "0xbb", safe=89, finalized=88))
    assert t.head == NetworkHead(100, "0xaa", 99, 98)
    t.observe("a", HeadReport(95, "0xa5", safe=94, finalized=93))  # node a went back
    assert (t.head.number, t.head.safe, t.head.finalized) == (100, 99, 98)
    assert t.node_head("a") == 95 and t.lag("a") == 5 and t.lag("b") == 10


def test_same_number_new_hash_is_a_reorg_and_changes_the_tag() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    old = t.head.tag
    assert t.observe("a", HeadReport(100, "0xAB".lower()))
    assert t.head.tag == (100, "0xab") != old
    assert t.reorgs == 1 and t.moves == 2
    assert not t.observe("b", HeadReport(100, None))  # a number alone says nothing new


def test_finality_marks_are_monotonic_and_never_above_the_head() -> None:
    t = tracker()
    t.observe("a", HeadReport(10, "0x1", safe=50, finalized=40))
    assert (t.head.safe, t.head.finalized) == (10, 10)
    assert not t.observe("b", HeadReport(10, "0x1", safe=5, finalized=4))
    assert (t.head.safe, t.head.finalized) == (10, 10)


def test_moving_only_finality_is_not_a_head_move() -> None:
    t = tracker()
    t.observe("a", HeadReport(10, "0x1", finalized=5))
    assert not t.observe("a", HeadReport(10, "0x1", finalized=8))
    assert t.head.finalized == 8 and t.moves == 1


def test_routing_by_block_and_forget() -> None:
    t = tracker()
    assert t.nodes_with(1) == [] and t.lag("a") is None
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(97, "0xbb"))
    assert t.nodes_with(98) == ["a"]
    assert t.nodes_with(97) == ["a", "b"]
    assert t.has("b", 97) and not t.has("b", 98)
    assert t.at_head("a") and not t.at_head("b")
    t.forget("a")
    assert t.nodes_with(97) == ["b"] and t.lag("a") is None
    assert t.head.number == 100  # forgetting a node never lowers the head
    assert t.lags() == {"a": None, "b": 3}


def test_at_head_needs_the_same_hash() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xbb"))  # rival tip: b's word is newest
    assert t.at_head("b") and not t.at_head("a")


def test_observe_number_answers_never_decrease() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    assert t.observe_number("b", 90) == 100  # the lagging node's answer is lifted
    assert t.node_head("b") == 90
    assert t.observe_number("b", 105) == 105
    assert t.head.number == 105 and t.head.hash is None  # hash unknown until a probe


def test_resolve_tags() -> None:
    t = tracker()
    assert t.resolve("latest") is None and t.resolve("finalized") is None
    assert t.resolve("earliest") == 0 and t.resolve(7) == 7
    t.observe("a", HeadReport(100, "0xaa", safe=99, finalized=98))
    assert [t.resolve(x) for x in ("latest", "safe", "finalized", "pending", "hash")] == [
        100,
        99,
        98,
        None,
        None,
    ]


def test_age_uses_the_injected_clock() -> None:
    clock = Clock()
    t = HeadTracker(["a"], clock=clock)
    assert t.age("a") is None
    t.observe("a", HeadReport(1))
    clock.now += 2.5
    assert t.age("a") == 2.5


def test_unknown_node_is_an_error() -> None:
    t = tracker()
    try:
        t.observe("zzz", HeadReport(1))
    except KeyError:
        return
    raise AssertionError("unknown node accepted")


def _block(number: int, digest: str) -> dict[str, object]:
    return {"number": hex(number), "hash": digest}


def test_parse_probe_reads_latest_safe_finalized_in_any_order() -> None:
    reply = orjson.dumps(
        [
            {"jsonrpc": "2.0", "id": 3, "result": _block(98, "0xF")},
            {"jsonrpc": "2.0", "id": 1, "result": _block(100, "0xA")},
            {"jsonrpc": "2.0", "id": 2, "result": _block(99, "0xB")},
        ]
    )
    assert parse_probe(reply) == HeadReport(100, "0xa", safe=99, finalized=98)


def test_parse_probe_without_finality_tags() -> None:
    reply = orjson.dumps(
        [
            {"jsonrpc": "2.0", "id": 1, "result": _block(100, "0xa")},
            {"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "unknown tag"}},
            {"jsonrpc": "2.0", "id": 3, "result": None},
        ]
    )
    assert parse_probe(reply) == HeadReport(100, "0xa")


def test_parse_probe_rejects_junk() -> None:
    for junk in (
        b"not json",
        b"{}",
        b'"x"',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no batches"}}',
        orjson.dumps([{"id": 1, "result": {"number": "zz"}}]),
        orjson.dumps([{"id": 1, "result": {"number": 5}}, 7]),
    ):
        assert parse_probe(junk) is None
