"""Server-side dashboard sessions: ``p:s:<sha256(session id)>`` -> acct, csrf, created.

Only the SHA-256 of a session id is stored, as for API keys: a Redis dump does
not hand out live sessions. The TTL is the session's max age.
"""

from __future__ import annotations

import hashlib
import secrets

from gateway.redis import keyspace as ks
from gateway.store.core import StoreCore


class Sessions(StoreCore):
    """Create, read and end dashboard sessions (security.py adds listing and metadata)."""

    def _session_key(self, session_id: str) -> str:
        return ks.session(self.prefix, hashlib.sha256(session_id.encode()).hexdigest())

    async def create_session(self, account_id: str, max_age_s: int) -> tuple[str, str]:
        """A new session for the account: (session id for the cookie, CSRF token)."""
        session_id = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        key = self._session_key(session_id)
        now = await self.now_ms()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, mapping={"acct": account_id, "csrf": csrf, "created": now})
        pipe.expire(key, max(1, max_age_s))
        await pipe.execute()
        return session_id, csrf

    async def session(self, session_id: str) -> tuple[str, str] | None:
        """(account id, CSRF token) of a live session, or None."""
        if not session_id or len(session_id) > 128 or not session_id.isprintable():
            return None
        data = await self.redis.hgetall(self._session_key(session_id))
        if not data.get("acct") or not data.get("csrf"):
            return None
        return data["acct"], data["csrf"]

    async def end_session(self, session_id: str) -> None:
        """Forget a session server-side: its cookie is worthless from now on."""
        if session_id:
            await self.redis.delete(self._session_key(session_id))
