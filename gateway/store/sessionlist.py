"""The dashboard sessions of an account as the Security page lists them: where from
(masked network), which browser, when last seen; ending one or all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.identity.netmask import mask_ip
from gateway.store.securitycore import SecurityCore

MAX_USER_AGENT = 200


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One live dashboard session of an account, as the Security page lists it."""

    ref: str  # SHA-256 of the session id: names it without revealing it
    created_at: int
    last_seen_at: int
    ip: str
    user_agent: str
    current: bool


class SessionList(SecurityCore):
    """Track, list and end an account's sessions."""

    async def track_session(
        self,
        account_id: str,
        session_id: str,
        ip: str,
        user_agent: str,
        max_age_s: int,
        max_sessions: int = 50,
    ) -> None:
        """Index a new session under its account, with where it came from.

        Past ``max_sessions`` the oldest sessions are ended, so a script
        that logs in in a loop cannot grow the index (or the Security page)
        without bound.
        """
        ref = self.session_ref(session_id)
        now = await self.store.now_ms()
        index = self._sessions(account_id)
        pipe = self.redis.pipeline(transaction=True)  # one slot: {acct}
        pipe.zadd(index, {ref: now})
        pipe.expire(index, max(1, max_age_s))
        pipe.zrange(index, 0, -(max(1, max_sessions) + 1))
        _, _, oldest = await pipe.execute()
        oldest = [old for old in oldest if old != ref]  # a same-ms tie never evicts the new one
        if oldest:
            pipe = self.redis.pipeline(transaction=False)
            for old in oldest:
                pipe.delete(self._session_hash(old))
            pipe.zrem(index, *oldest)
            await pipe.execute()
        await self.touch_session(session_id, ip=mask_ip(ip), ua=user_agent[:MAX_USER_AGENT])

    async def touch_session(self, session_id: str, **fields: str) -> None:
        """Set last-seen to Redis time (plus ``fields``) only while the session lives.

        A plain HSET on a session ended a moment ago would bring its hash
        back without a TTL; the script writes only to a hash that exists.
        """
        if self._touch is None:
            self._touch = self.redis.register_script(_TOUCH_LUA)
        args: list[str] = []
        for name, value in fields.items():
            args += [name, value]
        await self._touch(keys=[self._session_hash(self.session_ref(session_id))], args=args)

    async def sessions(self, account_id: str, current_session_id: str) -> list[SessionInfo]:
        """Live sessions, newest first; index entries of ended sessions are pruned."""
        index = self._sessions(account_id)
        refs: list[str] = await self.redis.zrange(index, 0, -1)
        if not refs:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for ref in refs:
            pipe.hmget(self._session_hash(ref), "acct", "created", "seen", "ip", "ua")
        rows = await pipe.execute()
        current = self.session_ref(current_session_id) if current_session_id else ""
        out, gone = [], []
        for ref, (acct, created, seen, ip, ua) in zip(refs, rows, strict=True):
            if acct != account_id or not created:
                gone.append(ref)
                continue
            out.append(
                SessionInfo(
                    ref=ref,
                    created_at=int(created),
                    last_seen_at=int(seen or created),
                    ip=ip or "",
                    user_agent=ua or "",
                    current=ref == current,
                )
            )
        if gone:
            await self.redis.zrem(index, *gone)
        out.sort(key=lambda s: (not s.current, -s.last_seen_at))
        return out

    async def end_sessions(self, account_id: str, keep_session_id: str = "") -> int:
        """End every session of the account except ``keep_session_id``; how many ended."""
        index = self._sessions(account_id)
        keep = self.session_ref(keep_session_id) if keep_session_id else ""
        refs = [r for r in await self.redis.zrange(index, 0, -1) if r != keep]
        if not refs:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for ref in refs:
            pipe.delete(self._session_hash(ref))
        pipe.zrem(index, *refs)
        replies = await pipe.execute()
        return sum(int(n) for n in replies[:-1])

    async def end_session_ref(self, account_id: str, ref: str) -> bool:
        """End one session of the account by its ref; False if it has no such session."""
        index = self._sessions(account_id)
        if await self.redis.zscore(index, ref) is None:
            return False
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self._session_hash(ref))
        pipe.zrem(index, ref)
        await pipe.execute()
        return True


# KEYS[1] session hash   ARGV pairs: field, value, ... (may be none)
# sets field "seen" to Redis time in ms, plus the pairs given
# returns 1 if written, 0 if the session no longer exists (nothing written)
_TOUCH_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000))
redis.call('HSET', KEYS[1], 'seen', now, unpack(ARGV))
return 1
"""
