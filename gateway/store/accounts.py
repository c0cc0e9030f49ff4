"""Accounts, and the one ``Store`` facade behind the CLI and the dashboard.

``Store`` is composed of one mixin per concept: Accounts (here), ApiKeys
(apikeys.py), Sessions (sessions.py), Attempts (attempts.py), UsageReading
(usage.py), Passwords (passwords.py), over StoreCore (core.py). Every Redis
key name comes from gateway.redis.keyspace. Times are Redis ``TIME`` in ms,
the same clock admit.lua uses. The names callers import from here are
re-exported so ``from gateway.store.accounts import X`` keeps working.
"""

from __future__ import annotations

import secrets

from gateway.config import Config
from gateway.redis import keyspace as ks
from gateway.store.apikeys import (
    ApiKeys,
    normalize_ips,
    normalize_methods,
    normalize_origin,
    normalize_origins,
)
from gateway.store.attempts import Attempts
from gateway.store.core import (
    DAY_MS,
    HOUR_MS,
    MINUTE_MS,
    AlreadyExists,
    Busy,
    NotFound,
    RedisClient,
    StoreError,
)
from gateway.store.keyevents import publish_key_change
from gateway.store.passwords import HASH_NICE, Passwords
from gateway.store.records import Account, AttemptCounter, KeyRecord, Usage, counts_towards_cap
from gateway.store.sessions import Sessions
from gateway.store.usage import UsageReading


def normalize_email(email: str) -> str:
    email = email.strip().lower()
    local, at, domain = email.partition("@")
    if (
        not at
        or not local
        or "." not in domain
        or len(email) > 254
        or any(c.isspace() for c in email)
    ):
        raise StoreError(f"{email!r} is not an email address")
    return email


class Accounts(Passwords):
    """Account operations: sign-up, look-up, password check, plan switch."""

    async def create_account(self, email: str, password: str, plan: str | None = None) -> Account:
        email = normalize_email(email)
        plan = plan or self.default_plan
        self._check_plan(plan)
        if len(password) < 8:
            raise StoreError("the password must have at least 8 characters")
        account_id = "acct_" + secrets.token_hex(8)
        # Claim the email first (SET NX): two sign-ups racing for one email
        # cannot both win.
        if not await self.redis.set(ks.email(self.prefix, email), account_id, nx=True):
            raise AlreadyExists(f"an account for {email} already exists")
        now = await self.now_ms()
        try:
            pw = await self._hash_work(self._hasher.hash, password)
        except BaseException:
            await self.redis.delete(ks.email(self.prefix, email))  # give the email back
            raise
        await self.redis.hset(
            ks.account(self.prefix, account_id),
            mapping={"id": account_id, "email": email, "pw": pw, "plan": plan, "created": now},
        )
        return Account(account_id, email, plan, now)

    async def account_by_email(self, email: str) -> Account:
        try:
            email = normalize_email(email)
        except StoreError:
            raise NotFound(f"no account for {email!r}") from None
        account_id = await self.redis.get(ks.email(self.prefix, email))
        if not account_id:
            raise NotFound(f"no account for {email}")
        return await self.account(account_id)

    async def account(self, account_id: str) -> Account:
        data = await self.redis.hgetall(ks.account(self.prefix, account_id))
        if not data:
            raise NotFound(f"no account {account_id}")
        return Account(data["id"], data["email"], data["plan"], int(data["created"]))

    async def verify_password(self, email: str, password: str) -> Account | None:
        """The account if the password is right, else None (same work either way).

        An email without an account is verified against a dummy hash with the
        same parameters, after the same two Redis reads, so timing does not
        tell which emails have accounts. argon2 runs off the event loop.
        """
        dummy = await self._dummy()
        try:
            account_id = await self.redis.get(ks.email(self.prefix, normalize_email(email)))
        except StoreError:
            account_id = None
        data = await self.redis.hgetall(ks.account(self.prefix, account_id or "-"))
        pw_hash = data.get("pw") or ""
        ok = await self._hash_work(self._verify, pw_hash or dummy, password)
        if not (ok and pw_hash and account_id):
            return None
        return Account(data["id"], data["email"], data["plan"], int(data["created"]))

    async def set_plan(self, account_id: str, plan: str) -> Account:
        """Switch the account's plan; every key follows from its next request."""
        self._check_plan(plan)
        account = await self.account(account_id)
        await self.redis.hset(ks.account(self.prefix, account_id), "plan", plan)
        for key_id in await self.redis.smembers(ks.account_keys(self.prefix, account_id)):
            khash = await self.redis.get(ks.key_index(self.prefix, key_id))
            if khash:
                # Only the plan changes. The bucket (t, ts) stays: the admission
                # scripts clamp its level to the new plan's burst, so switching
                # plans back and forth never hands out a fresh full bucket.
                await self.redis.hset(ks.record_key(self.prefix, khash), "plan", plan)
                await publish_key_change(self.redis, self.prefix, khash)
        return Account(account.id, account.email, plan, account.created_at)


class Store(Accounts, ApiKeys, Sessions, Attempts, UsageReading):
    """Account, key, session, throttle and usage operations over one Redis (or Cluster) client."""

    @classmethod
    def from_config(cls, redis: RedisClient, cfg: Config) -> Store:
        """The Store as every part of the gateway (app, CLI) must build it."""
        dash = cfg.dashboard
        return cls(
            redis,
            prefix=cfg.redis.prefix,
            plans=[p.name for p in cfg.plans],
            default_plan=cfg.default_plan,
            max_keys=dash.max_keys_per_account,
            key_retention_ms=dash.inactive_key_retention_s * 1000,
            max_inactive_keys=dash.max_inactive_keys,
            hash_threads=dash.password_hash_threads,
            hash_wait_s=dash.password_hash_wait_s,
        )


__all__ = [
    "DAY_MS",
    "HASH_NICE",
    "HOUR_MS",
    "MINUTE_MS",
    "Account",
    "AlreadyExists",
    "AttemptCounter",
    "Busy",
    "KeyRecord",
    "NotFound",
    "RedisClient",
    "Store",
    "StoreError",
    "Usage",
    "counts_towards_cap",
    "normalize_email",
    "normalize_ips",
    "normalize_methods",
    "normalize_origin",
    "normalize_origins",
]
