"""ResponseCache: byte budget, LRU, head tags (reorgs), finality, the lagging-node guard."""

from __future__ import annotations

import gc
import tracemalloc

import orjson
import pytest

from gateway.intel.cache import ENTRY_OVERHEAD, ResponseCache, call_key
from gateway.intel.head import NetworkHead
from gateway.intel.policy import BY_ANSWER, FOREVER, HEAD, Kind, Policy, classify

H1 = NetworkHead(number=100, hash="0xa", safe=99, finalized=98)
H1_REORG = NetworkHead(number=100, hash="0xb", safe=99, finalized=98)
H2 = NetworkHead(number=101, hash="0xc", safe=100, finalized=99)


def size(key: bytes, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD


def test_forever_entries_survive_head_moves() -> None:
    c = ResponseCache(10_000, 1_000)
    key = call_key("eth_chainId", [])
    assert c.get("eth_chainId", key, FOREVER, H1) is None
    assert c.put(key, FOREVER, H1, b'"0x38"')
    c.on_head(H2)
    assert c.get("eth_chainId", key, FOREVER, H2) == b'"0x38"'
    assert (c.stats.hits, c.stats.misses) == (1, 1)
    assert c.stats.hits_by_method == {"eth_chainId": 1}


def test_head_entries_die_with_the_head_and_a_reorg_never_serves_the_old_tip() -> None:
    c = ResponseCache(10_000, 1_000)
    key = call_key("eth_getBlockByNumber", ["latest", False])
    assert c.put(key, HEAD, H1, b'{"number":"0x64","hash":"0xa"}')
    assert c.get("m", key, HEAD, H1) == b'{"number":"0x64","hash":"0xa"}'
    assert c.get("m", key, HEAD, H1_REORG) is None  # same number, new hash: a miss
    assert c.on_head(H1_REORG) == 1
    assert len(c) == 0 and c.bytes == 0 and c.stats.expired == 1


def test_on_head_keeps_the_current_heads_entries() -> None:
    c = ResponseCache(10_000, 1_000)
    c.put(b"k1", HEAD, H1, b"1")
    c.put(b"k2", HEAD, H2, b"2")
    c.put(b"k3", FOREVER, H1, b"3")
    assert c.on_head(H2) == 1
    assert c.get("m", b"k2", HEAD, H2) == b"2" and c.get("m", b"k3", FOREVER, H2) == b"3"


def test_byte_budget_is_never_exceeded_and_lru_order_evicts() -> None:
    value = b"x" * 100
    one = size(b"k0", value)
    c = ResponseCache(3 * one, one)
    for i in range(3):
        assert c.put(f"k{i}".encode(), FOREVER, H1, value)
    assert c.bytes == 3 * one and c.stats.evictions == 0
    assert c.get("m", b"k0", FOREVER, H1) == value  # k0 is now the most recent
    assert c.put(b"k3", FOREVER, H1, value)
    assert c.stats.evictions == 1 and c.bytes == 3 * one and c.peak == 3 * one
    assert c.get("m", b"k1", FOREVER, H1) is None  # the least recent went
    assert c.get("m", b"k0", FOREVER, H1) == value


def test_many_stores_stay_under_budget() -> None:
    c = ResponseCache(5_000, 1_000)
    for i in range(1_000):
        c.put(f"key-{i}".encode(), FOREVER, H1, b"v" * (i % 300))
        assert c.bytes <= 5_000
    assert c.peak <= 5_000 and c.stats.evictions > 0
    assert c.bytes == sum(size(k, v) for (k, _), v in c._entries.items())


def test_an_answer_over_the_entry_limit_is_not_stored() -> None:
    c = ResponseCache(10_000, 500)
    assert not c.put(b"k", FOREVER, H1, b"x" * 500)
    assert c.stats.too_big == 1 and len(c) == 0


def test_replacing_an_entry_does_not_double_count() -> None:
    c = ResponseCache(10_000, 1_000)
    c.put(b"k", FOREVER, H1, b"aaaa")
    c.put(b"k", FOREVER, H1, b"bb")
    assert c.bytes == size(b"k", b"bb") and len(c) == 1


def test_errors_null_and_never_are_not_stored() -> None:
    c = ResponseCache(10_000, 1_000)
    never = Policy(Kind.NEVER)
    assert not c.put(b"k", never, H1, b'"0x1"')
    assert not c.put(b"k", FOREVER, H1, b"null")
    assert c.get("m", b"k", never, H1) is None
    assert c.stats.misses == 0  # uncacheable calls are not counted as misses


def test_final_block_by_number_is_kept_across_heads() -> None:
    c = ResponseCache(10_000, 1_000)
    policy = classify("eth_getBlockByNumber", [hex(98), False], H1)
    assert policy == Policy(Kind.IF_FINAL, 98)
    assert c.put(b"k", policy, H1, b'{"number":"0x62"}', node_head=100)
    c.on_head(H2)
    assert c.get("m", b"k", classify("eth_getBlockByNumber", [hex(98), False], H2), H2)


def test_unfinal_block_by_number_lives_under_the_head_tag() -> None:
    c = ResponseCache(10_000, 1_000)
    policy = classify("eth_getBlockByNumber", [hex(99), False], H1)
    assert policy == Policy(Kind.UNTIL_HEAD_MOVES, 99)
    assert c.put(b"k", policy, H1, b'{"number":"0x63"}')
    assert c.get("m", b"k", policy, H1_REORG) is None  # reorged: not served


def test_by_hash_answers_are_final_only_when_their_block_is() -> None:
    c = ResponseCache(10_000, 1_000)
    final_tx = b'{"hash":"0x1","blockNumber":"0x62"}'  # block 98 <= finalized 98
    fresh_tx = b'{"hash":"0x2","blockNumber":"0x64"}'  # block 100: not final
    assert c.put(b"final", BY_ANSWER, H1, final_tx)
    assert c.put(b"fresh", BY_ANSWER, H1, fresh_tx)
    c.on_head(H1_REORG)
    assert c.get("m", b"final", BY_ANSWER, H1_REORG) == final_tx
    assert c.get("m", b"fresh", BY_ANSWER, H1_REORG) is None
    assert not c.put(b"nonumber", BY_ANSWER, H1, b'"0x5"')  # cannot prove finality


def test_lagging_node_answers_are_not_stored() -> None:
    c = ResponseCache(10_000, 1_000)
    logs = classify("eth_getLogs", [{"fromBlock": "0x1", "toBlock": hex(98)}], H1)
    assert not c.put(b"logs", logs, H1, b"[]", node_head=97)  # node lacks block 98
    assert c.put(b"logs", logs, H1, b"[]", node_head=98)
    assert not c.put(b"head", HEAD, H1, b'"0x1"', node_head=99)  # behind the keyed head
    assert c.put(b"head", HEAD, H1, b'"0x1"', node_head=100)
    unfinal = classify("eth_getBlockByNumber", [hex(99), False], H1)
    assert not c.put(b"b99", unfinal, H1, b'{"number":"0x63"}', node_head=99)
    tx = b'{"blockNumber":"0x62"}'
    assert not c.put(b"tx", BY_ANSWER, H1, tx, node_head=97)


@pytest.mark.parametrize("policy", [FOREVER, HEAD])
@pytest.mark.parametrize("length", [8, 600, 20_000])
def test_the_byte_count_covers_the_memory_the_entries_hold(policy: Policy, length: int) -> None:
    """orjson results keep a 4 KB+ buffer: the cache keeps exact copies and counts them fully."""
    count = max(50, 500_000 // (length + 300))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        c = ResponseCache(1 << 40, 1 << 30)
        for i in range(count):
            key = call_key("eth_getBalance", [f"0x{i:040x}", "latest"])
            c.put(key, policy, H1, orjson.dumps("0x" + "a" * length))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(c) == count
    assert held <= c.bytes, (held / count, c.bytes / count)
    assert c.bytes < 1.5 * held  # and counts it realistically, not a blanket guess
