"""Account security state: passwords, sessions, two-step log-in, deletion, reset links.

It extends the one ``Store`` (gateway/store/accounts.py) rather than repeating it:
accounts, keys and sessions are read and revoked through the Store's own
methods; only what is new lives here. Redis layout (``p`` = prefix, every
name from gateway/redis/keyspace.py; ``S`` = SHA-256 of a session id, the
name sessions.py gives the session hash):

    p:s:S                    session hash (sessions.py); this module adds the
                             fields ip (masked to /24 or /48), ua, seen (ms)
    p:a:{<acct>}:sess        sorted set S -> created ms: the account's sessions
    p:a:{<acct>}             account hash; fields added here: totp (the active
                             secret), totp_new (a secret awaiting its first code),
                             totp_step (last accepted TOTP time step: no replay)
    p:a:{<acct>}:rc          set of SHA-256 of the unused recovery codes
    p:l:<sha256(token)>      a log-in waiting for its second step: acct, next,
                             tries (TTL login_code_ttl_s)
    p:r:<sha256(token)>      password-reset token -> account id (TTL 1 h, GETDEL)

Secrets that only need checking (recovery codes, reset and pending-log-in
tokens, session ids) are stored as SHA-256: they carry 40+ bits of
randomness, so a fast hash is enough and a Redis dump hands out nothing
usable. The TOTP secret must be read back to check codes, so it is stored
as is, like every hosted provider's authenticator seed.

It stays whole because sessions, two-step log-in, recovery codes, deletion and
reset links all write the same account and session records through one
``SecurityStore``, so the Redis layout above is kept, and checked, in one
place.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyotp
from redis.commands.core import AsyncScript

from gateway.identity.netmask import mask_ip
from gateway.redis import keyspace as ks
from gateway.store.accounts import Account, NotFound, Store, StoreError, normalize_email

MIN_PASSWORD = 8
MAX_PASSWORD = 1024
MAX_USER_AGENT = 200
TOTP_ISSUER = "rpc-gateway"
# Fields of a key record that say who owned it or what it was for; an
# erased account's records keep only id, plan, times and state (billing).
_PERSONAL_KEY_FIELDS = ("name", "env", "hint", "org", "ips", "ipb", "mth", "used")


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One live dashboard session of an account, as the Security page lists it."""

    ref: str  # SHA-256 of the session id: names it without revealing it
    created_at: int
    last_seen_at: int
    ip: str
    user_agent: str
    current: bool


@dataclass(frozen=True, slots=True)
class PendingLogin:
    account_id: str
    next: str
    tries: int


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def normalize_recovery_code(code: str) -> str:
    """Recovery codes are typed by hand: case, spaces and dashes do not matter."""
    return "".join(c for c in code.lower() if c.isalnum())


_CODE_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/i/l look-alikes


def new_recovery_code() -> str:
    """About 49 random bits as ``xxxxx-xxxxx``, easy to read off paper and type."""
    raw = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(10))
    return f"{raw[:5]}-{raw[5:]}"


class SecurityStore:
    """Security operations on top of the shared ``Store`` (same Redis, same prefix)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.redis: Any = store.redis  # decode_responses=True; see Store.__init__
        self.prefix = store.prefix
        self._touch: AsyncScript | None = None
        self._step: AsyncScript | None = None

    # -- key names -------------------------------------------------------------
    def _acct(self, account_id: str) -> str:
        return ks.account(self.prefix, account_id)

    def _sessions(self, account_id: str) -> str:
        return ks.account_sessions(self.prefix, account_id)

    def _recovery(self, account_id: str) -> str:
        return ks.account_recovery(self.prefix, account_id)

    def _session_hash(self, ref: str) -> str:
        return ks.session(self.prefix, ref)

    def _pending(self, token: str) -> str:
        return ks.pending_login(self.prefix, _sha(token))

    def _reset(self, token: str) -> str:
        return ks.reset_token(self.prefix, _sha(token))

    @staticmethod
    def session_ref(session_id: str) -> str:
        """The name sessions.py stores a session under (SHA-256 of its id)."""
        return _sha(session_id)

    # -- passwords -------------------------------------------------------------
    async def check_password(self, account: Account, password: str) -> bool:
        if not 0 < len(password) <= MAX_PASSWORD:
            return False
        return await self.store.verify_password(account.email, password) is not None

    async def set_password(self, account_id: str, password: str) -> None:
        """Store a new argon2 hash (computed off the event loop)."""
        if len(password) < MIN_PASSWORD:
            raise StoreError(f"the new password must have at least {MIN_PASSWORD} characters")
        if len(password) > MAX_PASSWORD:
            raise StoreError(f"the new password must have at most {MAX_PASSWORD} characters")
        await self.store.account(account_id)  # NotFound for an erased account
        pw = await self.store.hash_password(password)  # bounded pool, off the loop
        await self.redis.hset(self._acct(account_id), "pw", pw)

    # -- sessions --------------------------------------------------------------
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

    # -- two-step log-in (TOTP) -------------------------------------------------
    async def totp_state(self, account_id: str) -> tuple[bool, str]:
        """(two-step log-in on, secret waiting for its first code or "")."""
        on, pending = await self.redis.hmget(self._acct(account_id), "totp", "totp_new")
        return bool(on), pending or ""

    async def start_totp(self, account_id: str) -> str:
        """A fresh secret, kept aside until a code from it is confirmed."""
        await self.store.account(account_id)
        secret = pyotp.random_base32()
        await self.redis.hset(self._acct(account_id), "totp_new", secret)
        return secret

    def provisioning_uri(self, secret: str, email: str) -> str:
        return pyotp.TOTP(secret).provisioning_uri(name=email, issuer_name=TOTP_ISSUER)

    async def confirm_totp(self, account_id: str, code: str, count: int) -> list[str] | None:
        """Turn two-step log-in on if ``code`` fits the pending secret.

        Returns the recovery codes (to show once; only hashes are kept), or
        None when the code is wrong or there is nothing pending.
        """
        _, pending = await self.totp_state(account_id)
        if not pending:
            return None
        step = _matching_step(pending, code)
        if step is None:
            return None
        codes = [new_recovery_code() for _ in range(count)]
        acct = self._acct(account_id)
        pipe = self.redis.pipeline(transaction=True)  # one slot: {acct}
        pipe.hset(acct, mapping={"totp": pending, "totp_step": step})
        pipe.hdel(acct, "totp_new")
        self._replace_recovery(pipe, account_id, codes)
        await pipe.execute()
        return codes

    async def new_recovery_codes(self, account_id: str, count: int) -> list[str] | None:
        """A fresh set of recovery codes replacing every unused one; None when two-step is off."""
        on, _ = await self.totp_state(account_id)
        if not on:
            return None
        codes = [new_recovery_code() for _ in range(count)]
        pipe = self.redis.pipeline(transaction=True)
        self._replace_recovery(pipe, account_id, codes)
        await pipe.execute()
        return codes

    def _replace_recovery(self, pipe: Any, account_id: str, codes: list[str]) -> None:
        pipe.delete(self._recovery(account_id))
        pipe.sadd(self._recovery(account_id), *(_sha(normalize_recovery_code(c)) for c in codes))

    async def disable_totp(self, account_id: str) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self._acct(account_id), "totp", "totp_new", "totp_step")
        pipe.delete(self._recovery(account_id))
        await pipe.execute()

    async def recovery_codes_left(self, account_id: str) -> int:
        return int(await self.redis.scard(self._recovery(account_id)))

    async def check_second_factor(self, account_id: str, code: str) -> bool:
        """A current TOTP code (each used once) or an unused recovery code (spent now)."""
        code = code.strip()
        if not code or len(code) > 64:
            return False
        digits = code.replace(" ", "")
        if len(digits) == 6 and digits.isascii() and digits.isdigit():
            secret = await self.redis.hget(self._acct(account_id), "totp")
            step = _matching_step(secret, digits) if secret else None
            if step is None:
                return False
            if self._step is None:
                self._step = self.redis.register_script(_STEP_LUA)
            # Compare-and-set in Redis: a code seen once is refused after,
            # even when two requests race with it.
            return bool(await self._step(keys=[self._acct(account_id)], args=[step]))
        spent = await self.redis.srem(
            self._recovery(account_id), _sha(normalize_recovery_code(code))
        )
        return bool(spent)

    # -- the log-in's second step -------------------------------------------------
    async def begin_pending_login(self, account_id: str, next_path: str, ttl_s: int) -> str:
        token = secrets.token_urlsafe(32)
        key = self._pending(token)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, mapping={"acct": account_id, "next": next_path, "tries": 0})
        pipe.expire(key, max(1, ttl_s))
        await pipe.execute()
        return token

    async def pending_login(self, token: str) -> PendingLogin | None:
        if not token or len(token) > 128 or not token.isprintable():
            return None
        data = await self.redis.hgetall(self._pending(token))
        if not data.get("acct"):
            return None
        return PendingLogin(data["acct"], data.get("next", ""), int(data.get("tries", 0)))

    async def pending_login_try(self, token: str) -> int:
        """Count one code try, before it is checked; returns the tries so far."""
        return int(await self.redis.hincrby(self._pending(token), "tries", 1))

    async def end_pending_login(self, token: str) -> None:
        if token:
            await self.redis.delete(self._pending(token))

    # -- password-reset links -----------------------------------------------------
    async def create_reset_token(self, email: str, ttl_s: int) -> tuple[Account, str]:
        """A one-time token for the account's password (``gateway accounts reset-password``)."""
        account = await self.store.account_by_email(normalize_email(email))
        token = secrets.token_urlsafe(32)
        await self.redis.set(self._reset(token), account.id, ex=max(1, ttl_s))
        return account, token

    async def _account_or_none(self, account_id: str | None) -> Account | None:
        """The account a reset token names; None when there is none (spent, erased)."""
        if not account_id:
            return None
        try:
            return await self.store.account(account_id)
        except NotFound:
            return None

    async def reset_account(self, token: str) -> Account | None:
        """Whose link this is, without spending it (the page shows the form)."""
        if not token or len(token) > 128 or not token.isprintable():
            return None
        return await self._account_or_none(await self.redis.get(self._reset(token)))

    async def use_reset_token(self, token: str, password: str) -> Account | None:
        """Set the password if the link is still good; the link dies either way.

        GETDEL makes the token single-use even when two submits race. Every
        session of the account ends: whoever had the old password is out.
        """
        if not token or len(token) > 128 or not token.isprintable():
            return None
        account = await self._account_or_none(await self.redis.getdel(self._reset(token)))
        if account is None:
            return None
        await self.set_password(account.id, password)
        await self.end_sessions(account.id)
        return account

    # -- account deletion ------------------------------------------------------------
    async def delete_account(self, account: Account) -> int:
        """Erase the account; returns how many keys were revoked.

        Order matters for a crash half-way: keys are revoked first (through
        Store.revoke_key, the same path as the Revoke button, all at once),
        then the account record goes (no new key or log-in from here), then
        keys created in the meantime are revoked too, then the key records
        lose everything personal. Usage counters are keyed by the key's
        hash, not the account, and stay for billing; the tombstoned records
        keep id, plan and times under an anonymous owner id.
        """
        revoked = await self._revoke_all(account.id)
        pipe = self.redis.pipeline(transaction=True)  # one slot: {acct}
        pipe.delete(self._acct(account.id))
        pipe.delete(self._recovery(account.id))
        await pipe.execute()
        await self.redis.delete(ks.email(self.prefix, account.email))
        revoked += await self._revoke_all(account.id)
        anon = "deleted_" + secrets.token_hex(8)
        key_ids = sorted(await self.redis.smembers(ks.account_keys(self.prefix, account.id)))
        for key_id in key_ids:
            try:
                khash = await self.store.key_hash_of(key_id)
            except NotFound:
                continue
            pipe = self.redis.pipeline(transaction=True)  # one slot: {H}
            pipe.hdel(ks.record_key(self.prefix, khash), *_PERSONAL_KEY_FIELDS)
            pipe.hset(ks.record_key(self.prefix, khash), "acct", anon)
            pipe.delete(ks.insight_log(self.prefix, khash))  # failed calls, with client networks
            await pipe.execute()
        await self.end_sessions(account.id)
        await self.redis.delete(
            ks.account_keys(self.prefix, account.id), ks.account_working(self.prefix, account.id)
        )
        return revoked

    async def _revoke_all(self, account_id: str) -> int:
        records = await self.store.list_keys(account_id)
        live = [r for r in records if r.revoked_at is None]
        await asyncio.gather(*(self.store.revoke_key(r.id, account_id) for r in live))
        return len(live)


def _matching_step(secret: str, code: str, window: int = 1, now: float | None = None) -> int | None:
    """The TOTP time step ``code`` belongs to (±``window`` steps for clock skew), or None."""
    if not (len(code) == 6 and code.isascii() and code.isdigit()):
        return None  # also keeps non-ASCII digits ("٣") away from compare_digest
    totp = pyotp.TOTP(secret)
    # the step number itself (RFC 6238): pyotp's timecode() takes a datetime
    # before 2.10, an int after, so it is not used
    step = int(time.time() if now is None else now) // totp.interval
    for candidate in _around(step, window):
        if hmac.compare_digest(totp.generate_otp(candidate), code):
            return candidate
    return None


def _around(step: int, window: int) -> Sequence[int]:
    return [step + d for d in range(-window, window + 1)]


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

# KEYS[1] account hash   ARGV[1] TOTP time step of a code that matched
# returns 1 and records the step if it is newer than the last one used, else 0
_STEP_LUA = """
local last = tonumber(redis.call('HGET', KEYS[1], 'totp_step') or '-1')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'totp_step', ARGV[1])
return 1
"""
