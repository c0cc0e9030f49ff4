"""``Buckets``: token buckets in Redis for transactions, taken all or none per script call.

The same bucket serves two limits: a sender's raw transactions on a
network (``tx_per_sender_rate`` / ``tx_per_sender_burst``, one bucket per
recovered sender whatever key sends it, so a sender cannot flood through
many keys) and a key's ``eth_sendBundle`` calls (the plan's
``bundle_rate``). The script reads Redis's clock (``TIME``), so every
gateway process agrees, and the check and the take are one atomic call.

The senders of one call (a bundle's) are one script call, so one Redis
round trip, and taken all or none: a refused bundle spends no sender's
tokens. On a Redis Cluster a script may only touch keys of one hash slot,
and each sender's bucket is tagged with its own sender (one slot per
sender, so the senders of a network spread over the cluster): there the
buckets are grouped by slot, one script call per slot, all sent at once;
"all or none" then holds within a slot only (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib import resources

from redis.crc import key_slot

from gateway.limits.limiter import ScriptRunner

BUCKET_LUA = resources.files("gateway").joinpath("tx", "bucket.lua").read_text()


class Buckets:
    """``take`` / ``take_all`` ask buckets; over the limit is a result, not an error."""

    def __init__(self, run: ScriptRunner, cluster: bool = False) -> None:
        self._run = run
        self._cluster = cluster

    async def take(
        self, key: str, rate: float, burst: int, cost: int = 1, now_ms: int | None = None
    ) -> int:
        """0 when ``cost`` tokens were taken, else the ms until they would be there."""
        wait, _ = await self.take_all([(key, cost)], rate, burst, now_ms)
        return wait

    async def take_all(
        self,
        costs: Sequence[tuple[str, int]],
        rate: float,
        burst: int,
        now_ms: int | None = None,
    ) -> tuple[int, int]:
        """Take each bucket's cost, all or none: ``(0, -1)``, or ``(wait_ms, index)`` of
        the first bucket short of its cost (nothing taken in its slot).

        A cost above ``burst`` can never be taken; the caller refuses it
        before asking. Raises ``LimiterUnavailable`` when Redis could not
        answer.
        """
        if rate <= 0 or not costs:
            return 0, -1
        head = [repr(float(rate)), str(burst), "" if now_ms is None else str(now_ms)]
        groups: dict[int, list[int]] = {}
        for i, (key, _cost) in enumerate(costs):
            groups.setdefault(key_slot(key.encode()) if self._cluster else 0, []).append(i)
        calls = [
            self._run([costs[i][0] for i in idx], [*head, *(str(costs[i][1]) for i in idx)])
            for idx in groups.values()
        ]
        answers = await asyncio.gather(*calls) if len(calls) > 1 else [await calls[0]]
        for idx, (allowed, retry_ms, short) in zip(groups.values(), answers, strict=True):
            if not int(allowed):
                return max(1, int(retry_ms)), idx[int(short) - 1]
        return 0, -1
