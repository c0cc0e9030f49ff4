"""Charging notifications: what a process delivered, metered per key in arrears.

Every delivered notification costs the plan's ``eth_subscription`` weight.
Rather than one Redis call per notification per socket, ``KeyState.pending``
is summed per key in this process and charged in one ``Limiter.charge`` call
per key every ``ws.charge_interval_s`` (capped at the plan's burst per call).
The charge meters what was sent: the key's allowlists have no say in it (a
key allowed only ``eth_subscribe`` still pays for its notifications), its
state, quota and bucket do. A refused charge stops the key's delivery until
the debt is paid: its notifications are dropped and counted, the unpaid
units stay owed (up to one burst), and the charger asks again once the
refusal's retry time has passed; only an admitted charge resumes delivery.
Charging in arrears means at most one interval of notifications beyond the
budget is delivered before dropping starts.

A dropped notification is never silent: the socket's next call (a frame
with an id) is not run but answered with -32005 ``Rate limit exceeded``,
its ``error.data`` saying how many notifications were dropped. That is the
error a client already handles for a refused call: ethers rejects the
call's promise with it; viem retries it after a backoff (so there only a
transport with ``retryCount: 0`` surfaces it). The socket and its
subscriptions stay open, and the count starts again from zero.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import orjson

from gateway.limits.limiter import Limiter, LimiterUnavailable, Status
from gateway.rpc import protocol as rpc
from gateway.ws.session import KeyState, Session

NOTIFICATION_METHOD = "eth_subscription"

CloseKey = Callable[[str, str, str], Awaitable[None]]  # khash, reason, metric label


class Charger:
    """Charges the pending notifications of a process's keys; one per ``WsService``."""

    def __init__(self, keys: dict[str, KeyState], limiter: Limiter, close_key: CloseKey) -> None:
        self._keys = keys  # the service's own dict: states it no longer needs go here
        self._limiter = limiter
        self._close_key = close_key
        self._retry_at: dict[str, float] = {}  # key hash -> when to ask for its debt again

    async def charge_all(self) -> None:
        """One charge per key that owes and may be asked; forget idle keys."""
        started = time.monotonic()
        keys = self._keys
        for khash, key in list(keys.items()):
            if key.pending and self._retry_at.get(khash, 0.0) <= started:
                await self._charge(key)
            if not key.sessions and not key.pending:
                del keys[khash]
                self._retry_at.pop(khash, None)

    async def _charge(self, key: KeyState) -> None:
        weight = key.plan.cost(NOTIFICATION_METHOD)
        cap = max(1, key.plan.burst // weight) if weight > 0 else 0
        count = min(key.pending, cap)
        key.pending -= count
        if weight <= 0:
            key.pending = 0
            return
        try:
            decision = await self._limiter.charge(key.khash, {NOTIFICATION_METHOD: count})
        except LimiterUnavailable:
            return  # not charged; the policy for calls (fail open/closed) still applies
        if decision.status is Status.ADMITTED:
            key.throttled_until = 0.0  # paid: deliver again
            self._retry_at.pop(key.khash, None)
            return
        if decision.status is Status.UNAUTHORIZED:
            await self._close_key(key.khash, "key revoked or expired", "revoked")
            return
        # Delivered but not paid: nothing more is delivered until this debt
        # (bounded by one burst) is paid, so arrears cannot be farmed.
        key.pending = min(key.pending + count, cap)
        wait = max(decision.retry_ms, 1) / 1000
        if decision.status is Status.QUOTA_EXCEEDED:
            wait = max(wait, 60.0)
        key.throttled_until = math.inf
        self._retry_at[key.khash] = time.monotonic() + wait


def dropped_signal(sess: Session, data: bytes) -> bytes | None:
    """The -32005 answer to ``data`` that tells of ``sess.missed`` dropped notifications.

    None (and nothing reset) for a frame with no id to answer (a notification,
    or not JSON): the frame then runs as usual and the next call tells.
    """
    try:
        parsed = rpc.parse_body(data)
    except Exception:  # not JSON (or too deep): its own error answers it
        return None
    info = {
        "reason": "notifications were dropped: this key is over its compute-unit budget",
        "dropped_notifications": sess.missed,
    }
    if isinstance(parsed, dict) and "id" in parsed:
        sess.missed = 0
        return rpc.error_body(rpc.RATE_LIMITED, parsed["id"], info)
    if isinstance(parsed, list):
        answers = [
            rpc.error_obj(rpc.RATE_LIMITED, c["id"], info)
            for c in parsed
            if isinstance(c, dict) and "id" in c
        ]
        if answers:
            sess.missed = 0
            return orjson.dumps(answers)
    return None
