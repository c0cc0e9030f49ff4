"""How a poll turns a block range into node reads: one small function, ``ReadLogs``.

``await read(criteria, first, last)`` returns ``(raw, to)``: the node's
``eth_getLogs`` result for blocks ``first..to`` as JSON bytes, ``to <=
last``; the poll delivers those and the rest follows next poll. A poll calls
nothing else to read logs, so a different way of splitting a range (chunks
a node takes, fetched concurrently and merged) replaces this one function
and the poll is unchanged.

Today's reader, ``HalvingReader``: ask for the range; when the answer is
too large (past ``filters.max_poll_bytes``, or the node says "more than N
results") ask for half, down to one block, which is read up to
``limits.max_buffered_answer_bytes``. The span that went through is
remembered per filter criteria (a bounded map), so the next poll of that
filter starts there instead of halving again from the whole range; after a
success at the remembered span it tries twice that, so a quiet stretch of
chain lets it grow back. Each poll's answer stays within the poll bound:
what a client that never reads can hold stays small. All of a
poll's reads share its one deadline (``FilterService``).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from gateway.filters.changes import NodeCall, NodeError, ReadLogs

__all__ = ["HalvingReader", "ReadLogs"]

_REMEMBER: Final = 4096  # criteria whose span is remembered; the map is emptied when full


class HalvingReader:
    """``ReadLogs`` that halves a range too large for one answer and remembers what worked.

    ``call`` reads within the poll bound; ``whole`` reads one block up to the
    gateway's buffer bound (a block's logs cannot be split further).
    """

    def __init__(self, call: NodeCall, whole: NodeCall) -> None:
        self._call = call
        self._whole = whole
        self._spans: dict[bytes, int] = {}

    async def __call__(self, criteria: dict[str, Any], first: int, last: int) -> tuple[bytes, int]:
        key = orjson.dumps(criteria)
        learnt = self._spans.get(key, 0)
        to = last if learnt <= 0 else min(last, first + learnt - 1)
        cut = False
        while True:
            params = {**criteria, "fromBlock": hex(first), "toBlock": hex(to)}
            read = self._whole if to <= first else self._call
            try:
                raw = await read("eth_getLogs", [params])
                break
            except NodeError as exc:
                if not exc.too_large or to <= first:
                    raise
                to = first + (to - first) // 2
                cut = True
                # learnt at once: a poll its deadline stops still leaves the next
                # one starting from the smaller span
                self._learn(key, to - first + 1)
        if not cut and learnt and to - first + 1 >= learnt:  # it went through: try more
            self._learn(key, 2 * learnt)
        return raw, to

    def _learn(self, key: bytes, span: int) -> None:
        if len(self._spans) >= _REMEMBER and key not in self._spans:
            self._spans.clear()
        self._spans[key] = span
