"""What a poll returns: new logs or block hashes since the last poll, re-orgs included.

Pure logic over an injected node call (``NodeCall``: method, params -> the
``result`` as JSON bytes), so the same code runs behind any transport.

Each poll remembers its last block (number, hash) and the logs it delivered
(``seen``, the last ``reorg_polls`` polls). The next poll first checks that
block is still canonical: the network head's hash answers that for free
when nothing moved, else one ``eth_getBlockByNumber``, which the gateway's
cache shares between every filter polled at the same head. If it is not, the
newest remembered poll still on the chain is the fork point: logs delivered
since, in blocks whose hash changed, come back with ``removed: true`` (as
geth sends them), and the blocks after the fork are scanned again without
delivering twice what is still canonical. A hash commits to every block
below it, so one matching hash vouches for everything delivered before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from gateway.intel.head import NetworkHead
from gateway.rpc.params import LogFilter, canonical_filter
from gateway.rpc.protocol import ErrorKind

# The node path: (method, params) -> the answer's ``result`` as JSON bytes.
NodeCall = Callable[[str, list[Any]], Awaitable[bytes]]
# A poll's logs reader (filters.logsread): (criteria, first, last) -> (the
# eth_getLogs result for first..to as JSON bytes, to).
ReadLogs = Callable[[dict[str, Any], int, int], Awaitable[tuple[bytes, int]]]

_HASH_FETCH_BATCH: Final = 16  # block hashes asked for at once by a block filter's poll


class NodeError(Exception):
    """The node path failed: its error (the catalogue's, or the node's own words).

    ``too_large``: the answer was more than the gateway holds, or the node said
    the query matched too many logs: a narrower block range may go through.
    """

    def __init__(self, kind: ErrorKind, data: Any = None, *, too_large: bool = False) -> None:
        super().__init__(kind.message)
        self.kind = kind
        self.data = data
        self.too_large = too_large


class Chain:
    """Canonical block hashes by number for one poll: the head's known, others asked once."""

    def __init__(self, call: NodeCall, head: NetworkHead) -> None:
        self._call = call
        self._known: dict[int, str | None] = {}
        if head.hash is not None:
            self._known[head.number] = head.hash.lower()

    async def hash_at(self, number: int) -> str | None:
        """The hash of block ``number`` on the node path's chain; None if it has no such block."""
        if number in self._known:
            return self._known[number]
        block = orjson.loads(await self._call("eth_getBlockByNumber", [hex(number), False]))
        digest = block.get("hash") if type(block) is dict else None
        found = digest.lower() if type(digest) is str else None
        self._known[number] = found
        return found


async def fork_index(seen: list[list[Any]], chain: Chain, finalized: int) -> int:
    """Index of the newest remembered poll whose block is still canonical (-1: none).

    The last one is asked first, so a poll without a re-org costs at most one
    look-up. A final block cannot change; a block the node does not know
    (None) is not taken for a re-org.
    """
    for k in range(len(seen) - 1, -1, -1):
        number, digest = seen[k][0], seen[k][1]
        if number <= finalized or digest is None:
            return k
        found = await chain.hash_at(number)
        if found is None or found == digest:
            return k
    return -1


def _criteria(crit: LogFilter) -> dict[str, Any]:
    """``address`` and ``topics`` as a node takes them (the range is the poll's own)."""
    out = canonical_filter(crit)
    for name in ("blockHash", "fromBlock", "toBlock"):
        out.pop(name, None)
    return out


def _number(value: Any) -> int | None:
    try:
        return int(value, 16) if type(value) is str else None
    except ValueError:
        return None


def _ident(log: dict[str, Any]) -> tuple[Any, Any]:
    return (str(log.get("blockHash", "")).lower(), log.get("logIndex"))


async def logs_changes(
    crit: LogFilter,
    next_block: int,
    seen: list[list[Any]],
    head: NetworkHead,
    call: NodeCall,
    *,
    span: int,
    reorg_polls: int,
    remember_bytes: int,
    read_logs: ReadLogs,
) -> tuple[list[Any], int, list[list[Any]]]:
    """(logs to answer, the next block to scan, what to remember) for one poll.

    ``span``: at most this many blocks are scanned per poll (the plan's
    eth_getLogs range; 0 = no cap); the rest follows next poll. The range is
    read by ``read_logs`` (``filters.logsread``: a range whose logs are too
    many for one answer is halved until it goes through, down to one block,
    so a busy stretch of chain never leaves a filter stuck); it may deliver
    fewer blocks than asked, the rest follows next poll.
    """
    chain = Chain(call, head)
    removed: list[Any] = []
    still: set[tuple[Any, Any]] = set()
    k = await fork_index(seen, chain, head.finalized)
    if seen and k < len(seen) - 1:  # a re-org since the last poll
        fork = seen[k][0] if k >= 0 else seen[0][0] - 1
        for entry in seen[k + 1 :]:
            for log in entry[2] or ():
                number = _number(log.get("blockNumber"))
                if number is None or number <= fork:
                    continue
                if await chain.hash_at(number) == str(log.get("blockHash", "")).lower():
                    still.add(_ident(log))
                else:
                    removed.append({**log, "removed": True})
        next_block = fork + 1
        seen = seen[: k + 1]
    upper = head.number
    if type(crit.to_block) is int:
        upper = min(upper, crit.to_block)
    new: list[Any] = []
    if next_block <= upper:
        to = upper if span <= 0 else min(upper, next_block + span - 1)
        raw, to = await read_logs(_criteria(crit), next_block, to)
        found = orjson.loads(raw)
        scanned = [log for log in found if type(log) is dict] if type(found) is list else []
        new = [log for log in scanned if _ident(log) not in still] if still else scanned
        # the node's answer's length measures the logs remembered: never re-encoded for it
        entry = [to, await chain.hash_at(to), scanned, len(raw)]
        seen = _remember(seen, entry, reorg_polls, remember_bytes)
        next_block = to + 1
    return removed + new, next_block, seen


async def block_changes(
    next_block: int,
    seen: list[list[Any]],
    head: NetworkHead,
    call: NodeCall,
    *,
    max_blocks: int,
    reorg_polls: int,
) -> tuple[list[str], int, list[list[Any]]]:
    """(new canonical block hashes, the next block, what to remember) for one poll.

    After a re-org the new chain's blocks from the fork on are returned
    (geth's block filter does the same: it reports new heads).
    """
    chain = Chain(call, head)
    k = await fork_index(seen, chain, head.finalized)
    if seen and k < len(seen) - 1:
        next_block = (seen[k][0] if k >= 0 else seen[0][0] - 1) + 1
        seen = seen[: k + 1]
    to = min(head.number, next_block + max_blocks - 1)
    hashes: list[str] = []
    number = next_block
    while number <= to:
        batch = range(number, min(to, number + _HASH_FETCH_BATCH - 1) + 1)
        found = await asyncio.gather(*(chain.hash_at(n) for n in batch))
        for digest in found:
            if digest is None:  # not on the node path yet: the rest next poll
                to = number - 1
                break
            hashes.append(digest)
            number += 1
    # Each block is remembered (not just the poll's last), so a re-org of the
    # tip is found at its own height and only the new blocks are reported.
    first = number - len(hashes)
    for i, digest in enumerate(hashes):
        seen = _remember(seen, [first + i, digest, None], reorg_polls, 0)
    return hashes, number, seen


def _remember(
    seen: list[list[Any]], entry: list[Any], polls: int, max_bytes: int
) -> list[list[Any]]:
    """``seen`` plus ``entry``, the newest ``polls`` kept; delivered logs only within bytes.

    An entry is [number, hash, logs or None] and, from a logs poll, the
    logs' size in bytes (the node answer's length), so nothing is encoded
    again to be measured; an entry stored without it is measured once.
    """
    kept = [*seen, entry][-polls:]
    budget = max_bytes
    for item in reversed(kept):  # the newest polls keep their logs first
        logs = item[2]
        if logs is None:
            continue
        if len(item) < 4:
            item.append(len(orjson.dumps(logs)))
        size = item[3]
        if size > budget:
            item[2] = None  # too much to keep: a re-org past it cannot mark these removed
        else:
            budget -= size
    return kept
