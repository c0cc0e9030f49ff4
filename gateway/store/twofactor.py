"""The two-step log-in: TOTP enrolment and checks, recovery codes, and the log-in
waiting for its second step.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyotp

from gateway.store.securitycore import SecurityCore, _sha

TOTP_ISSUER = "rpc-gateway"


@dataclass(frozen=True, slots=True)
class PendingLogin:
    account_id: str
    next: str
    tries: int


def normalize_recovery_code(code: str) -> str:
    """Recovery codes are typed by hand: case, spaces and dashes do not matter."""
    return "".join(c for c in code.lower() if c.isalnum())


_CODE_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/i/l look-alikes


def new_recovery_code() -> str:
    """About 49 random bits as ``xxxxx-xxxxx``, easy to read off paper and type."""
    raw = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(10))
    return f"{raw[:5]}-{raw[5:]}"


class TwoFactor(SecurityCore):
    """TOTP, recovery codes and pending log-ins of an account."""

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


# KEYS[1] account hash   ARGV[1] TOTP time step of a code that matched
# returns 1 and records the step if it is newer than the last one used, else 0
_STEP_LUA = """
local last = tonumber(redis.call('HGET', KEYS[1], 'totp_step') or '-1')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'totp_step', ARGV[1])
return 1
"""
