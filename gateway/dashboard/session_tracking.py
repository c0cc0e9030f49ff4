"""Which sessions an account has, and when each was last seen.

A middleware, so no log-in view has to remember it: when a view started a
new session (sign-up, log-in, the two-step code page) the session is
indexed under its account with the masked client IP and user agent; on
later requests its "last seen" is refreshed, at most once per
``dashboard.session_seen_interval_s`` per process (an in-process memo, so
most dashboard requests cost no extra Redis call).
"""

from __future__ import annotations

import time

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from gateway.dashboard.session import VISITOR, store_of
from gateway.dashboard.views import config_of
from gateway.rpc.handler import client_ip
from gateway.store.security import SecurityStore

_MEMO_MAX = 10_000  # sessions remembered per process before the memo starts over


class SeenMemo:
    """Monotonic time of the last "last seen" write per session, in this process."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def due(self, session_id: str, interval_s: float, now: float) -> bool:
        last = self._last.get(session_id)
        if last is not None and now - last < interval_s:
            return False
        if len(self._last) >= _MEMO_MAX:
            self._last.clear()
        self._last[session_id] = now
        return True


SEEN = web.AppKey("dashboard_session_seen", SeenMemo)


def security_of(request: web.Request) -> SecurityStore:
    """The security operations over the app's one Store (cheap: no state of its own)."""
    return SecurityStore(store_of(request))


@web.middleware
async def session_tracking_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    before = request.get(VISITOR)
    response = await handler(request)
    after = request.get(VISITOR)
    if after is None or after.session_id is None or after.account_id is None:
        return response
    cfg = config_of(request).dashboard
    memo = request.config_dict[SEEN]
    if before is None or before.session_id != after.session_id:
        await security_of(request).track_session(
            after.account_id,
            after.session_id,
            client_ip(request),
            request.headers.get(hdrs.USER_AGENT, ""),
            cfg.session_max_age_s,
            cfg.max_sessions_per_account,
        )
        memo.due(after.session_id, cfg.session_seen_interval_s, time.monotonic())
    elif memo.due(after.session_id, cfg.session_seen_interval_s, time.monotonic()):
        await security_of(request).touch_session(after.session_id)
    return response
