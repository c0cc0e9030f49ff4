"""classify(): what may be cached and for how long; call keys; block refs."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.intel.cache import answer, answer_block, call_key, result_bytes
from gateway.intel.head import NetworkHead
from gateway.intel.methods import READS, block_ref
from gateway.intel.policy import Kind, Policy, classify

HEAD = NetworkHead(number=1000, hash="0xhead", safe=999, finalized=990)
H32 = "0x" + "ab" * 32

CASES: list[tuple[str, Any, Policy]] = [
    ("eth_chainId", [], Policy(Kind.FOREVER)),
    ("net_version", [], Policy(Kind.FOREVER)),
    ("eth_blockNumber", [], Policy(Kind.UNTIL_HEAD_MOVES)),
    # latest names the head: routed only to a node on the agreed chain that has it
    ("eth_call", [{"to": "0x1"}, "latest"], Policy(Kind.UNTIL_HEAD_MOVES, 1000)),
    ("eth_call", [{"to": "0x1"}], Policy(Kind.UNTIL_HEAD_MOVES, 1000)),  # default: latest
    ("eth_getBalance", ["0x1", "latest"], Policy(Kind.UNTIL_HEAD_MOVES, 1000)),
    ("eth_getBalance", ["0x1", "pending"], Policy(Kind.NEVER)),
    ("eth_getBalance", ["0x1", "safe"], Policy(Kind.UNTIL_HEAD_MOVES)),
    ("eth_getBalance", ["0x1", hex(900)], Policy(Kind.IF_FINAL, 900)),
    ("eth_getBalance", ["0x1", hex(995)], Policy(Kind.UNTIL_HEAD_MOVES, 995)),
    ("eth_getBalance", ["0x1", hex(1001)], Policy(Kind.NEVER, 1001)),  # beyond the head
    ("eth_getBalance", ["0x1", {"blockHash": H32}], Policy(Kind.UNTIL_HEAD_MOVES)),
    ("eth_getBalance", ["0x1", {"blockNumber": hex(10)}], Policy(Kind.IF_FINAL, 10)),
    ("eth_getBalance", ["0x1", "bogus"], Policy(Kind.NEVER)),
    ("eth_getStorageAt", ["0x1", "0x0", "earliest"], Policy(Kind.IF_FINAL, 0)),
    ("eth_getBlockByNumber", [hex(990), False], Policy(Kind.IF_FINAL, 990)),
    ("eth_getBlockByNumber", [hex(991), False], Policy(Kind.UNTIL_HEAD_MOVES, 991)),
    ("eth_getBlockByNumber", ["latest", False], Policy(Kind.UNTIL_HEAD_MOVES, 1000)),
    ("eth_getBlockByNumber", ["finalized", False], Policy(Kind.UNTIL_HEAD_MOVES)),
    ("eth_getBlockByNumber", ["pending", False], Policy(Kind.NEVER)),
    ("eth_getBlockByNumber", [], Policy(Kind.NEVER)),
    ("eth_getBlockReceipts", [hex(5)], Policy(Kind.IF_FINAL, 5)),
    ("eth_getBlockReceipts", [H32], Policy(Kind.UNTIL_HEAD_MOVES)),
    ("eth_getBlockByHash", [H32, True], Policy(Kind.IF_FINAL, None)),
    ("eth_getTransactionByHash", [H32], Policy(Kind.IF_FINAL, None)),
    ("eth_getTransactionReceipt", [H32], Policy(Kind.IF_FINAL, None)),
    ("eth_getTransactionReceipt", [], Policy(Kind.NEVER)),
    ("eth_getLogs", [{"fromBlock": hex(1), "toBlock": hex(990)}], Policy(Kind.IF_FINAL, 990)),
    ("eth_getLogs", [{"fromBlock": "earliest", "toBlock": hex(9)}], Policy(Kind.IF_FINAL, 9)),
    (
        "eth_getLogs",
        [{"fromBlock": hex(1), "toBlock": hex(991)}],
        Policy(Kind.UNTIL_HEAD_MOVES, 991),
    ),
    # to = latest: moves with the head; the numbered end still steers routing
    ("eth_getLogs", [{"fromBlock": hex(1)}], Policy(Kind.UNTIL_HEAD_MOVES, 1)),
    ("eth_getLogs", [{"fromBlock": hex(1), "toBlock": "pending"}], Policy(Kind.NEVER)),
    ("eth_getLogs", [{"blockHash": H32}], Policy(Kind.IF_FINAL, None)),
    ("eth_getLogs", [{"fromBlock": "0xzz"}], Policy(Kind.NEVER)),
    ("eth_getLogs", ["nope"], Policy(Kind.NEVER)),
    ("eth_sendRawTransaction", ["0x01"], Policy(Kind.NEVER)),
    ("eth_gasPrice", [], Policy(Kind.NEVER)),
    ("eth_getFilterChanges", ["0x1"], Policy(Kind.NEVER)),
    ("eth_estimateGas", [{"to": "0x1"}], Policy(Kind.NEVER)),
]


@pytest.mark.parametrize(("method", "params", "expected"), CASES)
def test_classify(method: str, params: Any, expected: Policy) -> None:
    assert classify(method, params, HEAD) == expected


def test_before_the_first_head_only_constants_are_cacheable() -> None:
    empty = NetworkHead()
    assert classify("eth_chainId", [], empty).kind is Kind.FOREVER
    assert classify("eth_getBlockByNumber", [hex(1), False], empty).kind is Kind.NEVER
    # finalized unknown (-1): block 0 exists but is not known to be final yet
    head = NetworkHead(number=10, hash="0x1")
    assert classify("eth_getBlockByNumber", ["0x0", False], head).kind is Kind.UNTIL_HEAD_MOVES


def test_writes_and_filters_are_not_reads() -> None:
    assert "eth_sendRawTransaction" not in READS
    assert "eth_getFilterChanges" not in READS and "eth_newFilter" not in READS
    assert {"eth_call", "eth_getLogs", "eth_chainId", "eth_getTransactionReceipt"} <= READS


def test_block_ref_forms() -> None:
    assert block_ref("latest") == "latest"
    assert block_ref("0x10") == 16 and block_ref(16) == 16
    assert block_ref(H32) == "hash"
    assert block_ref({"blockHash": H32}) == "hash"
    assert block_ref({"blockNumber": "0x2"}) == 2
    for bad in ("0x", "12", "0xzz", -1, None, 1.5, True, {"blockHash": 3}, {}, "0x" + "1" * 65):
        assert block_ref(bad) is None, bad


def test_call_key_is_canonical() -> None:
    a = call_key("eth_call", [{"to": "0xABCDEF", "data": "0x01"}, "latest"])
    b = call_key("eth_call", [{"data": "0x01", "to": "0xabcdef"}, "latest"])
    assert a == b
    assert a != call_key("eth_call", [{"to": "0xabcdef", "data": "0x02"}, "latest"])
    assert a != call_key("eth_estimateGas", [{"to": "0xabcdef", "data": "0x01"}, "latest"])
    # non-hex strings keep their case (they mean something else)
    assert call_key("m", ["Latest"]) != call_key("m", ["latest"])


def test_call_key_never_merges_what_a_node_tells_apart() -> None:
    low, upper_digits = "0x" + "f3" * 20, "0x" + "F3" * 20
    key = call_key("eth_getBalance", [low, "latest"])
    assert call_key("eth_getBalance", [upper_digits, "latest"]) == key  # digits' case: same
    # a 0X prefix is another request (nodes refuse it), so another entry
    assert call_key("eth_getBalance", ["0X" + "f3" * 20, "latest"]) != key
    assert call_key("eth_getBalance", ["0X" + "F3" * 20, "latest"]) != key
    # not hex after 0x: the case stays
    assert call_key("m", ["0xZZ"]) != call_key("m", ["0xzz"])
    # a Go node reads the last of {"to","To"}: their order is the request
    a = call_key("eth_call", [{"to": "0x01", "To": "0x02"}, "latest"])
    b = call_key("eth_call", [{"To": "0x02", "to": "0x01"}, "latest"])
    assert a != b
    # the same with a rune Go folds onto an ASCII letter (LONG S onto s)
    c = call_key("eth_call", [{"gas": "0x1", "ga\u017f": "0x2"}, "latest"])
    d = call_key("eth_call", [{"ga\u017f": "0x2", "gas": "0x1"}, "latest"])
    assert c != d
    # keys that cannot collide are still sorted, on the slow path too
    e = call_key("eth_call", [{"to": "0xAB", "data": "0x01"}, "latest"])
    assert e == call_key("eth_call", [{"data": "0x01", "to": "0xab"}, "latest"])


def test_answer_block_takes_the_highest_number() -> None:
    assert answer_block(b'{"number":"0x10","hash":"0x1"}') == 16
    assert answer_block(b'[{"blockNumber":"0x5"},{"blockNumber": "0x7"}]') == 7
    assert answer_block(b'"0x1234"') is None and answer_block(b"[]") is None


def test_answer_wraps_the_result_for_the_callers_id() -> None:
    assert answer(b'"abc"', b'"0x1"') == b'{"jsonrpc":"2.0","id":"abc","result":"0x1"}'


def test_result_bytes() -> None:
    assert result_bytes(b'{"jsonrpc":"2.0","id":7,"result":"0x1"}') == b'"0x1"'
    assert result_bytes(b'{"result":{"number":"0x2","x":[1,2]},"id":1}') == (
        b'{"number":"0x2","x":[1,2]}'
    )
    big = b'{"jsonrpc":"2.0","id":1,"result":{"v":123456789012345678901234567890}}'
    assert result_bytes(big) == b'{"v":123456789012345678901234567890}'  # digits kept
    assert result_bytes(b'{"jsonrpc":"2.0","id":1,"result":null}') == b"null"
    for bad in (b"junk", b"[]", b'{"id":1,"error":{"code":-32000}}', b'{"id":1}'):
        assert result_bytes(bad) is None
