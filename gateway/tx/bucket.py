"""``Buckets``: token buckets in Redis for transactions, one script call each.

The same bucket serves two limits: a sender's raw transactions on a
network (``tx_per_sender_rate`` / ``tx_per_sender_burst``, one bucket per
recovered sender whatever key sends it, so a sender cannot flood through
many keys) and a key's ``eth_sendBundle`` calls (the plan's
``bundle_rate``). The script reads Redis's clock (``TIME``), so every
gateway process agrees, and the check and the take are one atomic call.
The key's own admission (admit.lua / lease.lua) stays as it is: this is a
second, separate round trip made only for the transaction methods.
"""

from __future__ import annotations

from importlib import resources

from gateway.limits.limiter import ScriptRunner

BUCKET_LUA = resources.files("gateway").joinpath("tx", "bucket.lua").read_text()


class Buckets:
    """``take`` asks one bucket; over the limit is a result (the wait in ms), not an error."""

    def __init__(self, run: ScriptRunner) -> None:
        self._run = run

    async def take(
        self, key: str, rate: float, burst: int, cost: int = 1, now_ms: int | None = None
    ) -> int:
        """0 when ``cost`` tokens were taken, else the ms until they would be there.

        A cost above ``burst`` could never pass: it is taken as ``burst``
        (a bundle of more transactions of one sender than the burst is
        judged as a full bucket's worth). Raises ``LimiterUnavailable``
        when Redis could not answer.
        """
        if rate <= 0:
            return 0
        args = [repr(float(rate)), str(burst), str(min(cost, burst))]
        args.append("" if now_ms is None else str(now_ms))
        allowed, retry_ms = await self._run([key], args)
        return 0 if int(allowed) else max(1, int(retry_ms))
