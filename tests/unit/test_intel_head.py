"""HeadTracker: heads by confirmation and agreement, lies proven, marks a quorum reaches,
routing by block."""

from __future__ import annotations

import orjson

from gateway.intel.head import HeadReport, HeadRules, HeadTracker, NetworkHead, parse_probe


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker() -> HeadTracker:
    return HeadTracker(["a", "b"], clock=Clock())


def test_the_head_is_what_the_nodes_in_service_agree_on() -> None:
    t = tracker()
    assert t.observe("a", HeadReport(100, "0xaa", safe=99, finalized=98))
    assert t.head.number == 100 and t.head.finalized == -1  # the only node so far
    assert t.block_number() == 100
    assert t.observe("b", HeadReport(90, "0xbb", safe=89, finalized=88))
    # b has a head now: two current nodes, and a alone may lead 90 by one block only
    assert t.head == NetworkHead(90, "0xbb", 89, 88)  # marks both reached
    assert t.block_number() == 100  # eth_blockNumber answers never decrease
    t.observe("a", HeadReport(91, "0xa91", safe=90, finalized=88, parent="0xbb"))
    assert t.head.tag == (91, "0xa91")  # a leads the agreed block by one, along it
    assert t.node_head("a") == 91 and t.lag("a") == 0 and t.lag("b") == 1


def test_same_number_new_hash_is_a_reorg_and_changes_the_tag() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    old = t.head.tag
    assert t.observe("a", HeadReport(100, "0xAB".lower()))
    assert t.head.tag == (100, "0xab") != old
    assert t.reorgs == 1 and t.moves == 2
    assert not t.observe("b", HeadReport(100, None))  # a number alone says nothing new


def test_a_mark_above_the_nodes_own_head_or_going_back_is_ignored() -> None:
    t = tracker()
    t.observe("a", HeadReport(10, "0x1", safe=50, finalized=40))  # above its own head
    t.observe("b", HeadReport(10, "0x1", safe=9, finalized=8))
    assert (t.head.safe, t.head.finalized) == (-1, -1)  # a's marks never counted
    t.observe("a", HeadReport(10, "0x1", safe=9, finalized=8))
    assert (t.head.safe, t.head.finalized) == (9, 8)
    t.observe("a", HeadReport(10, "0x1", safe=5, finalized=4))  # going back: ignored
    t.observe("b", HeadReport(11, "0x2", safe=10, finalized=9))
    assert (t.head.safe, t.head.finalized) == (9, 8)  # a still says 9/8
    t.observe("a", HeadReport(11, "0x2", safe=10, finalized=9))
    assert (t.head.safe, t.head.finalized) == (10, 9)


def test_one_nodes_word_makes_nothing_final_and_a_lone_node_only_two_below_its_head() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa", finalized=98))
    t.observe("b", HeadReport(100, "0xaa"))
    assert t.head.finalized == -1  # b has not said it: nothing is final yet
    t.forget("b")
    assert t.head.finalized == -1  # the one left is still one word
    alone = HeadTracker(["a"], clock=Clock())
    alone.observe("a", HeadReport(100, "0xaa", finalized=100))
    assert alone.head.finalized == 98  # a mark at the head is a re-org away from wrong


def test_moving_only_finality_is_not_a_head_move() -> None:
    t = HeadTracker(["a"], clock=Clock())
    t.observe("a", HeadReport(10, "0x1", finalized=5))
    assert not t.observe("a", HeadReport(10, "0x1", finalized=7))
    assert t.head.finalized == 7 and t.moves == 1


def test_routing_by_block_and_forget() -> None:
    t = tracker()
    assert t.nodes_with(1) == [] and t.lag("a") is None
    t.observe("a", HeadReport(97, "0x97"))
    t.observe("b", HeadReport(97, "0x97"))
    t.observe("a", HeadReport(98, "0x98", parent="0x97"))
    assert t.block_number() == 98
    assert t.nodes_with(98) == ["a"]
    assert t.nodes_with(97) == ["a", "b"]
    assert t.has("b", 97) and not t.has("b", 98)
    assert t.at_head("a") and not t.at_head("b")
    t.forget("a")
    assert t.nodes_with(97) == ["b"] and t.lag("a") is None
    assert t.head == NetworkHead(97, "0x97")  # nothing a said stays in force
    assert t.block_number() == 98  # the answers already given stay monotonic
    assert t.lags() == {"a": None, "b": 0}


def test_at_head_needs_the_same_hash() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xbb"))  # a rival tip: the head keeps its tag
    assert t.at_head("a") and not t.at_head("b")
    t.observe("a", HeadReport(100, "0xbb"))  # a re-organised onto b's tip
    assert t.head.tag == (100, "0xbb") and t.at_head("b")


def test_a_claim_moves_nothing_until_the_nodes_http_answer_has_its_hash() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xaa"))
    assert t.claim("a", 101, "0xa1")  # ask a for block 101
    assert t.head.number == 100
    assert t.vouch("a", 101, "0xa1")
    assert t.head.tag == (101, "0xa1")
    assert not t.claim("a", 101, "0xa1")  # known: nothing to ask
    assert t.claim("b", 102)  # a number alone (eth_blockNumber) is a claim too
    assert not t.vouch("b", 102, None) and t.head.number == 101


def test_headers_the_nodes_own_answers_contradict_eject_it() -> None:
    t = tracker()
    out: list[tuple[str, str]] = []
    t.on_eject = lambda node, why: out.append((node, why))
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xaa"))
    for n in (101, 102):
        t.claim("a", n, f"0xfake{n}")
        assert not t.vouch("a", n, f"0xreal{n}")  # a mismatch: neither hash counts
        assert t.head.number == 100 and not out
    t.claim("a", 103, "0xfake103")
    t.vouch("a", 103, "0xreal103")
    assert out and out[0][0] == "a" and "contradict" in out[0][1]
    assert t.node_head("a") is None and t.head.tag == (100, "0xaa")


def test_one_contradicted_header_counts_once() -> None:
    t = tracker()
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(node)
    t.observe("a", HeadReport(100, "0xaa"))
    t.claim("a", 101, "0xold")  # then a re-org the node's socket never announced
    for _ in range(5):  # probe after probe finds the new tip
        t.observe("a", HeadReport(101, "0xnew"))
    assert not out and t.head.tag == (101, "0xnew")


def test_a_match_resets_the_mismatches() -> None:
    t = tracker()
    t.observe("a", HeadReport(100, "0xaa"))
    for n in range(101, 111):  # a re-org racing each answer, then the match
        t.claim("a", n, "0xold")
        t.vouch("a", n, "0xnew")
        t.claim("a", n, "0xnew")
        t.vouch("a", n, "0xnew")
    assert t.node_head("a") == 110


def test_a_node_far_ahead_moves_the_head_no_further_than_its_solo_lead() -> None:
    t = HeadTracker(["a", "b", "c"], clock=Clock())
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(node)
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xaa"))
    t.observe("c", HeadReport(1_000_100, "0xff", parent="0xfe"))  # a private fork, far ahead
    assert t.head.tag == (100, "0xaa") and not out  # lead is no lie, and no vote either
    assert sorted(t.nodes_with(100)) == ["a", "b"]  # c gets no head-relative call
    t.observe("c", HeadReport(101, "0xc1", parent="0xaa"))  # back on the chain, one ahead
    assert t.head.tag == (101, "0xc1")


def test_nodes_that_disagree_hold_the_head_and_say_split() -> None:
    t = tracker()
    said: list[bool] = []
    t.on_split = lambda split, detail: said.append(split)
    t.observe("a", HeadReport(100, "0xaa"))
    t.observe("b", HeadReport(100, "0xaa"))
    t.observe("a", HeadReport(102, "0xa2", parent="0xa1"))
    t.observe("b", HeadReport(102, "0xb2", parent="0xb1"))
    assert t.split and said == [True] and t.head.tag == (100, "0xaa")
    t.observe("b", HeadReport(103, "0xa3", parent="0xa2"))  # b follows a's chain
    assert not t.split and said == [True, False] and t.head.tag == (103, "0xa3")


def test_a_node_behind_takes_no_part_and_stays_in() -> None:
    rules = HeadRules(stale_s=4.5)
    t = HeadTracker(["a", "b"], clock=Clock(), rules=rules, wall=lambda: 1_000.0)
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(node)
    t.observe("a", HeadReport(1_000, "0xa", stamp=1_000))
    t.observe("b", HeadReport(930, "0xb", stamp=930))  # 70 blocks late
    assert t.head.tag == (1_000, "0xa") and not out
    assert t.current("a") and not t.current("b")
    assert t.nodes_with(930) == ["a"]  # no head-relative call for b


def test_a_block_stamped_in_the_future_is_a_lie() -> None:
    t = HeadTracker(["a", "b"], clock=Clock(), wall=lambda: 1_000.0)
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(why)
    t.observe("a", HeadReport(10, "0xa", stamp=1_000))
    t.observe("b", HeadReport(10, "0xa", stamp=1_002))  # within head.clock_skew_s
    assert not out
    t.observe("b", HeadReport(11, "0xb", stamp=1_050, parent="0xa"))  # b alone runs ahead
    assert out and "future" in out[0] and t.node_head("b") is None


def test_a_dev_chain_stamped_ahead_on_every_node_is_no_lie() -> None:
    """hardhat_mine stamps blocks a second apart: every node of that chain is ahead alike."""
    t = HeadTracker(["a", "b"], clock=Clock(), wall=lambda: 1_000.0)
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(why)
    t.observe("a", HeadReport(50, "0x50", stamp=1_050))
    t.observe("b", HeadReport(50, "0x50", stamp=1_050))
    t.observe("a", HeadReport(51, "0x51", stamp=1_051, parent="0x50"))
    assert not out and t.head.tag == (51, "0x51")


def test_a_burst_a_second_a_block_ahead_of_the_clock_and_the_others_is_no_lie() -> None:
    """Two dev nodes, each mining a block per transaction on its own: the one that
    made more blocks in the last seconds runs a second a block ahead of the clock
    and of the other (a chain stamps each block at least a second after its
    parent). That is no lie; a block that jumps past what its own blocks
    explain is."""
    t = HeadTracker(["a", "b"], clock=Clock(), wall=lambda: 1_000.0)
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(why)
    t.observe("a", HeadReport(4, "0xa4", stamp=1_000))
    t.observe("b", HeadReport(4, "0xb4", stamp=1_000))
    for n in range(5, 10):  # b: five blocks within the same second
        t.observe("b", HeadReport(n, f"0xb{n}", stamp=1_000 + n - 4, parent=f"0xb{n - 1}"))
    assert not out and t.node_head("b") is not None
    t.observe("b", HeadReport(10, "0xb10", stamp=1_060, parent="0xb9"))  # 55 s in one block
    assert out and "future" in out[0] and t.node_head("b") is None


def test_a_dev_chain_keeps_its_lead_on_the_clock_and_that_is_no_lie() -> None:
    """Hardhat, after a burst, stamps every later block as far ahead of the clock:
    a block made 8 s after a burst of six is still ~4 s ahead (measured on the
    pinned Hardhat: leads 3.71, 3.68, 3.65 s at 0, 4 and 8 s after the burst).
    The stamps' gap then exceeds a second a block, the lead does not; a block
    whose lead jumps past a second a block is still a lie."""
    wall = [1_000.0]
    t = HeadTracker(["a", "b"], clock=Clock(), wall=lambda: wall[0])
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(why)
    t.observe("a", HeadReport(4, "0xa4", stamp=1_000))
    t.observe("b", HeadReport(6, "0xb6", stamp=1_004))  # b's burst: 4 s ahead
    wall[0] += 8.0  # no block for 8 s, then two blocks, still 4 s ahead
    t.observe("b", HeadReport(7, "0xb7", stamp=1_012, parent="0xb6"))
    t.observe("b", HeadReport(8, "0xb8", stamp=1_012 + 1, parent="0xb7"))
    assert not out and t.node_head("b") is not None
    t.observe("b", HeadReport(9, "0xb9", stamp=1_008 + 30, parent="0xb8"))  # 30 s in one block
    assert out and "future" in out[0] and t.node_head("b") is None


def test_a_stamp_ahead_of_the_clock_makes_no_honest_node_look_behind() -> None:
    """A node whose first block is stamped a minute ahead (nothing of its own to
    measure it by) is not taken out, and its stamp reads as the clock: the
    honest node, stamped now, stays current."""
    t = HeadTracker(["a", "b"], clock=Clock(), rules=HeadRules(stale_s=4.5), wall=lambda: 1_000.0)
    t.observe("a", HeadReport(100, "0xa", stamp=1_000))
    t.observe("b", HeadReport(160, "0xf", stamp=1_060))
    assert t.current("a") and t.current("b")


def test_a_node_catching_up_fast_stays_in() -> None:
    """A node mining a burst (hardhat_mine) or catching up after a stall runs
    far faster than any block time and is right: speed never takes it out."""
    clock = Clock()
    t = HeadTracker(["a"], clock=clock, rules=HeadRules())
    out: list[str] = []
    t.on_eject = lambda node, why: out.append(why)
    t.observe("a", HeadReport(100, "0x64"))
    for n in range(101, 151):  # 50 blocks in 50 ms
        clock.now += 0.001
        t.observe("a", HeadReport(n, hex(n)))
    assert not out and t.head.number == 150 and t.node_head("a") is not None


def test_resolve_tags() -> None:
    t = HeadTracker(["a"], clock=Clock())
    assert t.resolve("latest") is None and t.resolve("finalized") is None
    assert t.resolve("earliest") == 0 and t.resolve(7) == 7
    t.observe("a", HeadReport(100, "0xaa", safe=99, finalized=98))
    assert [t.resolve(x) for x in ("latest", "safe", "finalized", "pending", "hash")] == [
        100,
        98,  # one node: its marks at least two blocks below its head
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
