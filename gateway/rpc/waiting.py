"""Short waits instead of refusals: a call over its plan's rate that the bucket will
have room for within ``max_wait_s`` sleeps until then and is asked about again.

The wait decides nothing itself. The limiter's refusal says when the bucket
will hold the call (``Decision.retry_ms``); the call sleeps that long (times
the calls of its key waiting ahead of it) and goes through the same atomic
admission again (``lease.lua`` or ``admit.lua``), as many times as it takes
within its wait. So across processes no more is ever admitted than the
bucket allows, whichever admission mode runs; an ask after a wait counts no
second rate-limited refusal (``limiter.REASKED``). A batch admitted call by
call waits for its refused calls only, which are asked about again as a
batch of their own (in their order) and put back in their places.

Only the bucket's refusals wait (the plan's rate, or the owner's per-key
rate cap): a daily quota, a call costing more than the bucket holds, a key
or allowlist refusal are answered at once. At most ``limits.max_waiting``
calls of one key wait at once in this process; a call past them is refused
as before (of a batch, the first refused calls that fit wait). A waiting
call holds its in-flight slot (``limits.max_in_flight``) and no node
connection: nothing has been forwarded yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import Histogram

from gateway.config import Config
from gateway.limits.limiter import REASKED, Decision, Limiter, Status

__all__ = ["AdmissionWaits"]

_WAITABLE = frozenset({Status.RATE_LIMITED, Status.KEY_RATE_CAPPED})
_WAIT_DIGITS = frozenset(str(int(s)) for s in _WAITABLE)
_ADMITTED = str(int(Status.ADMITTED))
_Observe = Callable[[float], None]  # a histogram child's ``observe``: seconds waited


class AdmissionWaits:
    """The waits of one process: each key's waiting calls, the plans' longest waits."""

    def __init__(self, cfg: Config, histogram: Histogram) -> None:
        self._max_wait = {p.name: cfg.max_wait_s(p.name) for p in cfg.plans}
        self._default = cfg.limits.max_wait_s
        self._max_waiting = cfg.limits.max_waiting
        self._histogram = histogram
        self._waiting: dict[str, int] = {}  # key hash -> its calls waiting now

    def waiting(self, khash: str) -> int:
        """How many calls of the key wait now in this process."""
        return self._waiting.get(khash, 0)

    async def after(
        self,
        decision: Decision,
        limiter: Limiter,
        network: str,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str,
        ip_bits: str,
        per_call: Sequence[str],
        slot: asyncio.Semaphore | None = None,
    ) -> Decision:
        """After ``limiter.admit`` refused (some of) a request (``decision``), with the
        same arguments: while the bucket refuses calls it will soon hold, wait for them.

        The caller skips this for a request admitted whole (no refusal, no mask): the
        hot path pays nothing for the waits. ``slot``: the in-flight slot the request
        holds; it is given back for the wait and taken again after (a key's waiting
        calls are capped by ``limits.max_waiting`` instead), so calls waiting for
        their own bucket never keep another key's calls from starting.
        """
        if decision.calls:
            size = sum(1 for s in decision.calls if s in _WAIT_DIGITS)
        else:
            size = 1 if decision.status in _WAITABLE else 0
        budget = self._max_wait.get(decision.plan, self._default)
        if not size or decision.retry_ms > budget * 1000:
            return decision
        held = self._waiting.get(khash, 0)
        if held + size > self._max_waiting:
            if not decision.calls or held >= self._max_waiting:
                return decision
            size = self._max_waiting - held  # a batch: its first refused calls wait
        self._waiting[khash] = held + size
        observe = self._histogram.labels(network).observe
        if slot is not None:
            slot.release()
        try:
            if decision.calls:
                return await self._batch(
                    limiter, decision, budget, observe, khash, origin, ip_bits, per_call, size, held
                )
            return await self._single(
                limiter,
                decision,
                budget,
                observe,
                khash,
                calls,
                methods,
                origin,
                ip_bits,
                per_call,
                held,
            )
        finally:
            left = self._waiting[khash] - size
            if left:
                self._waiting[khash] = left
            else:
                del self._waiting[khash]
            if slot is not None:  # taken back even when cancelled: the caller releases it
                await asyncio.shield(slot.acquire())

    @staticmethod
    async def _single(
        limiter: Limiter,
        decision: Decision,
        budget: float,
        observe: _Observe,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str,
        ip_bits: str,
        per_call: Sequence[str],
        ahead: int,
    ) -> Decision:
        """A request judged whole: sleep until the bucket holds it, ask again, repeat.

        ``ahead``: the key's calls already waiting here; the bucket serves them first,
        so the first sleep is that many turns longer (``_pause``).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + budget
        turns = 1 + ahead
        while decision.status in _WAITABLE:
            pause = _pause(decision.retry_ms, turns, loop.time(), deadline)
            if pause < 0:
                break
            turns = 1
            await asyncio.sleep(pause)
            decision = await _reask(limiter, khash, calls, methods, origin, ip_bits, per_call)
        observe(loop.time() - start)
        return decision

    @staticmethod
    async def _batch(
        limiter: Limiter,
        first: Decision,
        budget: float,
        observe: _Observe,
        khash: str,
        origin: str,
        ip_bits: str,
        per_call: Sequence[str],
        size: int,
        ahead: int,
    ) -> Decision:
        """A batch judged call by call: its first ``size`` refused calls wait, and are
        asked about again (as a batch of their own) until admitted or out of time.

        The batch is answered once its last call is, so it sleeps until the bucket
        should hold all of them (and the ``ahead`` calls waiting before it): one
        ask, not one per call."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + budget
        mask = list(first.calls)
        waiting = [i for i, s in enumerate(mask) if s in _WAIT_DIGITS][:size]
        last, retry_ms = first, first.retry_ms
        while True:
            pending = [i for i in waiting if mask[i] in _WAIT_DIGITS]
            pause = _pause(retry_ms, ahead + len(pending), loop.time(), deadline)
            if not pending or pause < 0:
                break
            ahead = 0
            await asyncio.sleep(pause)
            sub = [per_call[i] for i in pending]
            counts: dict[str, int] = {}
            for method in sub:
                counts[method] = counts.get(method, 0) + 1
            many = len(sub) > 1
            asked = await _reask(
                limiter, khash, len(sub), counts, origin, ip_bits, sub if many else ()
            )
            if not asked.calls and asked.status not in _WAITABLE | {Status.ADMITTED}:
                break  # judged whole, and not on the bucket (the key went away): stop here
            digits = asked.calls or str(int(asked.status)) * len(sub)
            now = loop.time()
            for i, digit in zip(pending, digits, strict=True):
                mask[i] = digit
                if digit == _ADMITTED:
                    observe(now - start)
            last, retry_ms = asked, asked.retry_ms
        now = loop.time()
        for i in waiting:
            if mask[i] in _WAIT_DIGITS:  # waited, then refused after all
                observe(now - start)
        text = "".join(mask)
        status = Status.ADMITTED if _ADMITTED in text else first.status
        return Decision(
            status,
            first.key_id,
            last.limit or first.limit,
            last.remaining,
            last.reset_s,
            max(1, retry_ms),
            first.plan,
            text,
        )


def _pause(retry_ms: int, turns: int, now: float, deadline: float) -> float:
    """Seconds to sleep before asking again: ``turns`` times the limiter's retry time
    (the calls to be served before this ask, each about one retry's worth of units),
    cut at the deadline; -1 when not even one retry fits before it (give up now).

    Asking only when the bucket should hold the call keeps a key's waiting calls
    from all asking Redis at each refill, one of them admitted, the rest refused.
    """
    one = max(1, retry_ms) / 1000
    if now + one > deadline:
        return -1.0
    return min(one * turns, deadline - now)


async def _reask(
    limiter: Limiter,
    khash: str,
    calls: int,
    methods: Mapping[str, int],
    origin: str,
    ip_bits: str,
    per_call: Sequence[str],
) -> Decision:
    """``limiter.admit`` for calls that waited: a refusal is not counted again (``REASKED``)."""
    token = REASKED.set(True)
    try:
        return await limiter.admit(khash, calls, methods, origin, ip_bits, per_call=per_call)
    finally:
        REASKED.reset(token)
