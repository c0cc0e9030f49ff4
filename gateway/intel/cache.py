"""The in-process answer cache: LRU, bounded in bytes, finality-aware keys.

What it stores is the ``result`` of a call as raw JSON bytes, never a whole
answer: each caller's answer is rebuilt around its own id (``answer``), so a
hit costs no parse and no node ever sees the call.

Keys are ``(call_key, tag)``: ``tag`` is None for answers that cannot change
(FOREVER, or IF_FINAL at or below the finalized block) and the network head's
``(number, hash)`` for the rest. When the head moves, ``on_head`` drops every
entry of an older tag at once, so head-dependent entries cost memory for one
block only; the LRU order only ever evicts to stay under ``max_bytes``.

The byte count is the memory the entries hold, not just their lengths:

- every stored key and value is an exact-size copy (``_exact``). An
  ``orjson.dumps`` result keeps the buffer orjson grew while writing: traced
  with tracemalloc (orjson 3.13, CPython 3.11), an entry holding a 12-byte
  result took 4.3 KB, a 604-byte one 8.4 KB, 5 KB 65 KB and 100 KB 1.04 MB:
  a cache that kept them held 4 to 15 times what it counted;
- plus a measured overhead per entry (``ENTRY_OVERHEAD``, and
  ``TAGGED_OVERHEAD`` more for an entry under a head tag). Measured with
  tracemalloc over 100 to 180,000 entries of exact-size keys and values
  (dict resizes included): 200-238 B per final entry (the OrderedDict slot
  and its link, the ``(key, tag)`` tuple, two bytes headers and their
  rounding), 285-390 B per head-tagged one (its slot in the tag's set as
  well). Large values are malloc'd apart (8-16 B of chunk header each),
  well inside the rounding up.

So ``bytes`` is the traced memory of the entries within a few per cent, and
a full cache of one network holds at most ``max_bytes`` of it
(``tests/integration/test_intel_cache_app.py`` fills a real app's caches
with tiny and with large answers and measures it).

It stays whole because the key builder, the byte accounting and the LRU are one
measured contract (the bound above holds only when keys, sizes and eviction
agree), and a third of it is this docstring.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from gateway.intel.head import NetworkHead
from gateway.intel.policy import Kind, Policy

ENTRY_OVERHEAD: Final = 256  # bytes per entry beyond key and value (measured 200-238)
TAGGED_OVERHEAD: Final = (
    160  # more per head-tagged entry: its tag set slot (measured 285-390 in all)
)
_Tag = tuple[int, str | None] | None
_Slot = tuple[bytes, _Tag]

# Block numbers inside an answer: a block's "number", a tx/receipt/log's
# "blockNumber". The highest one decides whether the whole answer is final.
_BLOCK_FIELD: Final = re.compile(rb'"(?:blockNumber|number)"\s*:\s*"0x([0-9a-fA-F]{1,16})"')


# Bytes that may make two spellings of one call differ: an upper-case ASCII
# letter (hex case, a key's case) or any non-ASCII byte (runes Go folds onto
# ASCII letters: KELVIN SIGN, LONG S, dotted / dotless I).
_MAYBE_SPELLING: Final = re.compile(rb"[A-Z\x80-\xff]")
_HEX_STRING: Final = re.compile(r"0x[0-9a-fA-F]*\Z")


def call_key(method: str, params: Any) -> bytes:
    """A canonical key for (method, params), merging only what every node reads alike.

    - object keys in sorted order: JSON leaves member order meaningless;
    - the hex digits of a ``0x``-prefixed hex string in lower case (an address,
      a hash, a quantity, call data): hex decoding ignores the digits' case.

    Never merged: a ``0X`` prefix (some nodes refuse it: a different request),
    strings that are not hex, key spellings, and the member order of an object
    holding two keys that a Go node folds alike (``{"to":a,"To":b}``: the last
    one wins there, so the order decides what the node reads).
    """
    raw = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    if _MAYBE_SPELLING.search(raw) is not None:  # rare: walk the params only then
        raw = orjson.dumps(_canon(params))
    return method.encode() + b"\x00" + raw


def _canon(value: Any) -> Any:
    """``value`` with hex in lower case and keys sorted, as the fast path of ``call_key``."""
    kind = type(value)
    if kind is str:
        return value.lower() if _HEX_STRING.match(value) else value
    if kind is list:
        return [_canon(v) for v in value]
    if kind is dict:
        items = [(k, _canon(v)) for k, v in value.items()]
        if _unfoldable(value):
            items.sort(key=_first)
        return dict(items)
    return value


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _unfoldable(obj: dict[str, Any]) -> bool:
    """Whether no two keys of ``obj`` can name one Go field (so their order is meaningless).

    ASCII keys fold as Go folds them (upper case); any non-ASCII key counts
    as foldable onto another: that only costs a shared entry, never a wrong answer.
    """
    folded = set()
    for key in obj:
        if not key.isascii():
            return False
        folded.add(key.upper())
    return len(folded) == len(obj)


def entry_size(key: bytes, value: bytes, tag: _Tag) -> int:
    """The memory one entry holds, as the byte bound counts it (module docstring)."""
    size = len(key) + len(value) + ENTRY_OVERHEAD
    return size if tag is None else size + TAGGED_OVERHEAD


def _exact(data: bytes) -> bytes:
    """An exact-size copy: ``bytes(b)`` would return ``b`` itself, orjson's spare buffer too."""
    return bytes(memoryview(data))


def answer_block(result: bytes) -> int | None:
    """The highest block number named in an answer's result, None when it names none."""
    found = _BLOCK_FIELD.findall(result)
    return max(int(h, 16) for h in found) if found else None


def result_bytes(reply: bytes) -> bytes | None:
    """The raw JSON of a single successful answer's ``result``; None for errors and junk.

    Numbers beyond 64 bits (which orjson would turn into floats) keep their
    exact digits through the slow parser, so a cached result is the node's.
    """
    try:
        obj = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or "error" in obj or "result" not in obj:
        return None
    result = obj["result"]
    if type(result) is str:  # the common case: a hex quantity or data
        return orjson.dumps(result)
    if _has_float(result):
        try:
            exact = json.loads(reply, parse_int=orjson.Fragment, parse_float=orjson.Fragment)
        except ValueError:
            return None
        result = exact["result"]
    return orjson.dumps(result)


def _has_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def answer(id_json: bytes, result: bytes) -> bytes:
    """A complete JSON-RPC answer around cached ``result`` bytes for the caller's id."""
    return b'{"jsonrpc":"2.0","id":' + id_json + b',"result":' + result + b"}"


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    evictions: int = 0  # pushed out to stay under max_bytes
    expired: int = 0  # dropped because the head moved
    too_big: int = 0  # answers over max_entry_bytes, not stored
    hits_by_method: dict[str, int] = field(default_factory=dict)
    misses_by_method: dict[str, int] = field(default_factory=dict)


class ResponseCache:
    """One network's cache (the head tags of two networks never mix)."""

    __slots__ = ("_by_tag", "_entries", "bytes", "max_bytes", "max_entry_bytes", "peak", "stats")

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = min(max_entry_bytes, max_bytes)
        self.bytes = 0
        self.peak = 0
        self.stats = CacheStats()
        self._entries: OrderedDict[_Slot, bytes] = OrderedDict()
        self._by_tag: dict[_Tag, set[bytes]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, method: str, key: bytes, policy: Policy, head: NetworkHead) -> bytes | None:
        """The cached result bytes for this call at ``head``, or None (a miss)."""
        kind = policy.kind
        if kind is Kind.NEVER:
            return None
        entries = self._entries
        value: bytes | None = None
        if kind is Kind.FOREVER:
            slot: _Slot = (key, None)
            value = entries.get(slot)
        elif kind is Kind.UNTIL_HEAD_MOVES:
            slot = (key, head.tag)
            value = entries.get(slot)
        else:  # IF_FINAL
            block = policy.block
            if block is None:  # by hash: final copy first, then this head's
                slot = (key, None)
                value = entries.get(slot)
                if value is None:
                    slot = (key, head.tag)
                    value = entries.get(slot)
            else:
                slot = (key, None if block <= head.finalized else head.tag)
                value = entries.get(slot)
        stats = self.stats
        if value is None:
            stats.misses += 1
            stats.misses_by_method[method] = stats.misses_by_method.get(method, 0) + 1
            return None
        entries.move_to_end(slot)
        stats.hits += 1
        stats.hits_by_method[method] = stats.hits_by_method.get(method, 0) + 1
        return value

    def put(
        self,
        key: bytes,
        policy: Policy,
        head: NetworkHead,
        result: bytes,
        *,
        node_head: int | None = None,
        finalized: int = -1,
    ) -> bool:
        """Store ``result`` (the raw JSON of a successful answer's result) if the policy allows.

        ``head`` must be the snapshot the call was classified at. ``node_head``
        is the head of the node that answered (None: trust it): an answer
        keyed to a block is kept only from a node that has that block, so a
        lagging node's empty logs or null block never become the cached truth.
        ``finalized``: the network's finalized mark now, if it moved on since
        ``head`` was taken (marks never go back): an answer final by now goes
        to the forever slot, not under a head tag that the next move drops.
        """
        final = max(head.finalized, finalized)
        kind = policy.kind
        if kind is Kind.NEVER or result == b"null":
            return False
        tag: _Tag
        if kind is Kind.FOREVER:
            tag = None
        elif kind is Kind.UNTIL_HEAD_MOVES:
            if node_head is not None and node_head < head.number:
                return False  # answered from behind the head this key names
            tag = head.tag
        else:
            block = policy.block
            if block is None:
                block = answer_block(result)
                if block is None:
                    return False  # says nothing about where it sits: not provably final
            if node_head is not None and node_head < block:
                return False
            tag = None if block <= final else head.tag
            if tag is not None and node_head is not None and node_head < head.number:
                return False
        size = entry_size(key, result, tag)
        if size > self.max_entry_bytes:
            self.stats.too_big += 1
            return False
        key, result = _exact(key), _exact(result)
        slot = (key, tag)
        entries = self._entries
        old = entries.pop(slot, None)
        if old is not None:
            self.bytes -= entry_size(key, old, tag)
        while entries and self.bytes + size > self.max_bytes:
            (old_key, old_tag), old_value = entries.popitem(last=False)
            self.bytes -= entry_size(old_key, old_value, old_tag)
            self.stats.evictions += 1
            if old_tag is not None:
                self._by_tag.get(old_tag, set()).discard(old_key)
        entries[slot] = result
        if tag is not None:
            keys = self._by_tag.setdefault(tag, set())
            keys.discard(key)  # a replaced entry's key object goes with it
            keys.add(key)
        self.bytes += size
        self.stats.stores += 1
        if self.bytes > self.peak:
            self.peak = self.bytes
        return True

    def on_head(self, head: NetworkHead) -> int:
        """Drop the entries of every head tag but ``head``'s; returns how many went."""
        current = head.tag
        stale = [tag for tag in self._by_tag if tag != current]
        dropped = 0
        entries = self._entries
        for tag in stale:
            for key in self._by_tag.pop(tag):
                value = entries.pop((key, tag), None)
                if value is not None:
                    self.bytes -= entry_size(key, value, tag)
                    dropped += 1
        self.stats.expired += dropped
        return dropped
