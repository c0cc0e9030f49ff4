"""``TxLimits``: the sender limit and a key's bundle rate, asked of Redis for one call.

Every transaction counts in its sender's bucket as a raw send does (a
bundle's three transactions of one sender take three tokens, with no clamp
to the burst: a bundle holding more of one sender than the burst could
never pass, and is refused without asking). All senders of a call are one
script call (``Buckets.take_all``: one Redis round trip, all or none). With
Redis unavailable, ``redis.fail_open`` decides as for admission.

Refusals are ``CallError`` in the gateway's words: -32005, HTTP 429 with
``Retry-After`` and a reason naming the limit (and the sender).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.config import NetworkConfig
from gateway.limits.limiter import LimiterUnavailable
from gateway.redis import keyspace as ks
from gateway.rpc.errors import RATE_LIMITED, SERVICE_UNAVAILABLE, explain
from gateway.rpc.localmethods import CallError
from gateway.tx.bucket import Buckets
from gateway.tx.codec import DecodedTx


class TxLimits:
    """One network's transaction limits over the shared ``Buckets``."""

    def __init__(self, buckets: Buckets, net: NetworkConfig, prefix: str, fail_open: bool) -> None:
        self.buckets = buckets
        self.net = net
        self.prefix = prefix
        self.fail_open = fail_open

    async def senders(self, txs: Sequence[DecodedTx]) -> None:
        """Take one token per transaction from each sender's bucket, or refuse the call."""
        rate, burst = self.net.tx_per_sender_rate, self.net.tx_per_sender_burst
        if rate <= 0:
            return
        counts: dict[str, int] = {}
        for tx in txs:
            counts[tx.sender] = counts.get(tx.sender, 0) + 1
        limit = f"sender limit: {_fmt(rate)} per second per sender, burst {burst}"
        for sender, n in counts.items():
            if n > burst:  # more than a full bucket: no wait would let it pass
                reason = (
                    f"the bundle holds {n} transactions of one sender, more than its burst "
                    f"({limit}): {sender}"
                )
                # 200, not 429: no wait would let it pass
                raise CallError(RATE_LIMITED.code, *explain(RATE_LIMITED, {"reason": reason}))
        names = list(counts)
        costs = [(ks.sender_bucket(self.prefix, self.net.name, s), counts[s]) for s in names]
        wait, short = await self._take(costs, rate, burst)
        if wait:
            raise limited(f"the sender's transaction rate reached ({limit}): {names[short]}", wait)

    async def bundles(self, khash: str, rate: float, burst: int) -> None:
        """Take the key's ``eth_sendBundle`` token (its plan's ``bundle_rate``), or refuse."""
        wait, _ = await self._take([(ks.bundle_bucket(self.prefix, khash), 1)], rate, burst)
        if wait:
            raise limited("the key's eth_sendBundle rate reached (its plan's bundle_rate)", wait)

    async def _take(self, costs: list[tuple[str, int]], rate: float, burst: int) -> tuple[int, int]:
        try:
            return await self.buckets.take_all(costs, rate, burst)
        except LimiterUnavailable:
            if self.fail_open:
                return 0, -1
            raise unavailable() from None


def limited(reason: str, wait_ms: int) -> CallError:
    """429 with ``Retry-After`` (whole seconds) and the wait in ms in ``error.data``."""
    data = {"reason": reason, "retry_after_ms": wait_ms}
    headers = {"Retry-After": str(max(1, math.ceil(wait_ms / 1000)))}
    return CallError.of(RATE_LIMITED, data, headers)


def unavailable() -> CallError:
    """Redis could not say, and the failure policy is closed."""
    return CallError.of(SERVICE_UNAVAILABLE)


def _fmt(rate: float) -> str:
    return str(int(rate)) if rate == int(rate) else repr(rate)
