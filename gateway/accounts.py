"""Accounts, keys, plans and usage: the one store behind the CLI and the dashboard.

Redis layout (``p`` is ``redis.prefix``, ``H`` the SHA-256 of an API key):

    p:{H}:k            key record hash (what admit.lua reads), with the token
                       bucket's fields t (tokens) and ts (ms) in it
    p:{H}:h:<hour>     requests per minute of that hour (field = minute 0..59), 49 h
    p:{H}:d:<day>      per-day totals: req, cu, lim, den, err, m:<method>, 91 days
    p:i:<key_id>       key id -> H (the id is what users and the CLI name)
    p:a:{<acct>}       account hash: id, email, pw (argon2), plan, created
    p:a:{<acct>}:keys  set of key ids of that account
    p:e:<email>        email -> account id

Every Redis key of one API key shares the ``{H}`` hash tag, so the hot path
runs on one Cluster slot. Writes that span slots (creating a key and its
indexes) are ordered so a crash in between leaves nothing usable behind.
Times are Redis ``TIME`` in ms, the same clock admit.lua uses.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from gateway.auth import generate_key, key_hash, key_hint
from gateway.limiter import bucket_key, cidr_bits, record_key, usage_prefix

RedisClient = Redis | RedisCluster

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


class StoreError(Exception):
    """A store operation cannot be done; the message says why, for users."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    email: str
    plan: str
    created_at: int


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    account: str
    name: str
    env: str
    plan: str
    hint: str
    created_at: int
    expires_at: int | None = None
    revoked_at: int | None = None
    last_used_at: int | None = None
    origins: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    rotated_to: str | None = None

    def status(self, now_ms: int) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now_ms``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now_ms >= self.expires_at:
            return "expired"
        return "active"

    def as_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "account": self.account,
            "name": self.name,
            "env": self.env,
            "plan": self.plan,
            "hint": self.hint,
            "status": self.status(now_ms),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "last_used_at": self.last_used_at,
            "origins": list(self.origins),
            "ips": list(self.ips),
            "methods": list(self.methods),
            "rotated_to": self.rotated_to,
        }


@dataclass(frozen=True, slots=True)
class Usage:
    """Usage of one key, as the dashboard and ``gateway usage`` show it."""

    key_id: str
    since_ms: int
    until_ms: int
    per_minute: list[tuple[int, int]]  # (minute start ms, requests), oldest first
    per_day: list[tuple[int, dict[str, int]]]  # (day start ms, totals), oldest first
    methods: dict[str, int] = field(default_factory=dict)
    total: int = 0
    limited: int = 0
    denied: int = 0
    errors: int = 0
    compute_units: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "since": self.since_ms,
            "until": self.until_ms,
            "requests": self.total,
            "rate_limited": self.limited,
            "denied": self.denied,
            "errors": self.errors,
            "compute_units": self.compute_units,
            "methods": self.methods,
            "per_minute": [[t, n] for t, n in self.per_minute if n],
            "per_day": [{"day": t, **v} for t, v in self.per_day],
        }


def _opt_int(value: str | None) -> int | None:
    return int(value) if value else None


def _lines(values: Iterable[str]) -> str:
    """Allowlist entries as the ``\\n``-framed string admit.lua searches."""
    items = [v for v in values if v]
    return "\n" + "\n".join(items) + "\n" if items else ""


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v for v in (value or "").split("\n") if v)


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


# An origin allowlist entry: "*", or [scheme://]host[:port] where the host
# may start with one wildcard label "*." (admit.lua matches it at a dot
# boundary). Hosts are names or IPv4 (no "*" inside), or [IPv6].
_ORIGIN_ENTRY = re.compile(
    r"(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?"
    r"(?P<host>(?:\*\.)?[a-z0-9_~%-]+(?:\.[a-z0-9_~%-]+)*|\[[0-9a-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def normalize_origin(entry: str) -> str:
    """One origin allowlist entry in the form admit.lua compares, or ``StoreError``.

    Lowercased, trailing ``/`` and a scheme's default port dropped (browsers
    never send them in ``Origin``). A wildcard must be a whole leading label:
    ``*example.com`` would match ``evilexample.com``, so it is refused with a
    hint instead of stored.
    """
    origin = entry.strip().rstrip("/").lower()
    if origin == "*":
        return origin
    m = _ORIGIN_ENTRY.fullmatch(origin)
    if m is None:
        if "*" in origin:
            raise StoreError(
                f"{entry.strip()!r}: a wildcard stands for whole subdomains only "
                "(e.g. *.example.com, which does not match example.com itself)"
            )
        raise StoreError(
            f"{entry.strip()!r} is not an origin (e.g. https://app.example.com or *.example.com)"
        )
    scheme, port = m["scheme"], m["port"]
    if port is not None and scheme is not None and _DEFAULT_PORTS.get(scheme) == port:
        origin = origin[: -len(port) - 1]
    return origin


def normalize_origins(origins: Iterable[str]) -> tuple[str, ...]:
    out = [normalize_origin(o) for o in origins if o.strip().rstrip("/")]
    return tuple(dict.fromkeys(out))


def normalize_ips(ips: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(display CIDRs, bit prefixes) or ``StoreError`` naming the bad entry.

    ``*`` is kept as is (admit.lua: matches every client); every other entry
    becomes ``cidr_bits``, so ``::/0`` is the non-empty prefix ``'6'``.
    """
    shown, bits = [], []
    for ip in ips:
        ip = ip.strip()
        if not ip:
            continue
        if ip == "*":
            bits.append(ip)
        else:
            try:
                bits.append(cidr_bits(ip))
            except ValueError:
                raise StoreError(f"{ip!r} is not an IP address or CIDR") from None
        shown.append(ip)
    return tuple(dict.fromkeys(shown)), tuple(dict.fromkeys(bits))


def normalize_methods(methods: Iterable[str]) -> tuple[str, ...]:
    out = []
    for method in methods:
        method = method.strip()
        if not method:
            continue
        if method != "*" and not method.replace("_", "").isalnum():
            raise StoreError(f"{method!r} is not a JSON-RPC method name")
        out.append(method)
    return tuple(dict.fromkeys(out))


class Store:
    """Account, key and usage operations over one Redis (or Cluster) client."""

    def __init__(
        self,
        redis: RedisClient,
        *,
        prefix: str = "gw",
        plans: Sequence[str] = ("free", "payg"),
        default_plan: str = "free",
        hasher: PasswordHasher | None = None,
    ) -> None:
        # redis-py's annotations do not model decode_responses=True (every
        # reply here is str), so the client is typed loosely on purpose.
        self.redis: Any = redis
        self.prefix = prefix
        self.plans = tuple(plans)
        self.default_plan = default_plan
        self._hasher = hasher or PasswordHasher()
        self._hit_script: AsyncScript | None = None  # dashboard support

    # -- helpers -------------------------------------------------------------
    async def now_ms(self) -> int:
        sec, usec = await self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _acct_key(self, account_id: str) -> str:
        return f"{self.prefix}:a:{{{account_id}}}"

    def _acct_keys_key(self, account_id: str) -> str:
        return f"{self.prefix}:a:{{{account_id}}}:keys"

    def _email_key(self, email: str) -> str:
        return f"{self.prefix}:e:{email}"

    def _kid_key(self, key_id: str) -> str:
        return f"{self.prefix}:i:{key_id}"

    def _check_plan(self, plan: str) -> None:
        if plan not in self.plans:
            raise StoreError(f"unknown plan {plan!r}; plans: {', '.join(self.plans)}")

    # -- accounts ------------------------------------------------------------
    async def create_account(self, email: str, password: str, plan: str | None = None) -> Account:
        email = normalize_email(email)
        plan = plan or self.default_plan
        self._check_plan(plan)
        if len(password) < 8:
            raise StoreError("the password must have at least 8 characters")
        account_id = "acct_" + secrets.token_hex(8)
        # Claim the email first (SET NX): two sign-ups racing for one email
        # cannot both win.
        if not await self.redis.set(self._email_key(email), account_id, nx=True):
            raise AlreadyExists(f"an account for {email} already exists")
        now = await self.now_ms()
        pw = self._hasher.hash(password)
        await self.redis.hset(
            self._acct_key(account_id),
            mapping={"id": account_id, "email": email, "pw": pw, "plan": plan, "created": now},
        )
        return Account(account_id, email, plan, now)

    async def account_by_email(self, email: str) -> Account:
        try:
            email = normalize_email(email)
        except StoreError:
            raise NotFound(f"no account for {email!r}") from None
        account_id = await self.redis.get(self._email_key(email))
        if not account_id:
            raise NotFound(f"no account for {email}")
        return await self.account(account_id)

    async def account(self, account_id: str) -> Account:
        data = await self.redis.hgetall(self._acct_key(account_id))
        if not data:
            raise NotFound(f"no account {account_id}")
        return Account(data["id"], data["email"], data["plan"], int(data["created"]))

    async def verify_password(self, email: str, password: str) -> Account | None:
        """The account if the password is right, else None (same work either way)."""
        try:
            account = await self.account_by_email(email)
            pw_hash = await self.redis.hget(self._acct_key(account.id), "pw") or ""
        except NotFound:
            account, pw_hash = None, ""
        if not pw_hash:
            # Burn comparable time so response timing does not reveal which
            # emails have accounts.
            self._hasher.hash(password)
            return None
        try:
            self._hasher.verify(pw_hash, password)
        except (VerificationError, InvalidHashError):
            return None
        return account

    async def set_plan(self, account_id: str, plan: str) -> Account:
        """Switch the account's plan; every key follows from its next request."""
        self._check_plan(plan)
        account = await self.account(account_id)
        await self.redis.hset(self._acct_key(account_id), "plan", plan)
        for key_id in await self.redis.smembers(self._acct_keys_key(account_id)):
            khash = await self.redis.get(self._kid_key(key_id))
            if khash:
                # Only the plan changes. The bucket (t, ts) stays: admit.lua
                # clamps its level to the new plan's burst, so switching plans
                # back and forth never hands out a fresh full bucket.
                await self.redis.hset(record_key(self.prefix, khash), "plan", plan)
        return Account(account.id, account.email, plan, account.created_at)

    # -- keys ----------------------------------------------------------------
    async def create_key(
        self,
        account_id: str,
        *,
        name: str = "",
        env: str = "",
        expires_in_ms: int | None = None,
        origins: Iterable[str] = (),
        ips: Iterable[str] = (),
        methods: Iterable[str] = (),
        max_keys: int | None = None,
    ) -> tuple[str, KeyRecord]:
        """Make a key; returns the key itself (shown once) and its record."""
        account = await self.account(account_id)
        if max_keys is not None and await self.active_key_count(account_id) >= max_keys:
            raise StoreError(
                f"you already have {max_keys} active keys, the most an account "
                "may have; revoke one you no longer use first"
            )
        origins_n = normalize_origins(origins)
        ips_shown, ips_bits = normalize_ips(ips)
        methods_n = normalize_methods(methods)
        name = name.strip()[:64] or "default"
        env = env.strip()[:32] or "production"
        if expires_in_ms is not None and expires_in_ms <= 0:
            raise StoreError("expiry must be in the future")
        key = generate_key()
        khash = key_hash(key)
        key_id = "key_" + secrets.token_hex(6)
        now = await self.now_ms()
        record: dict[str, Any] = {
            "id": key_id,
            "acct": account.id,
            "name": name,
            "env": env,
            "plan": account.plan,
            "hint": key_hint(key),
            "created": now,
            "exp": now + expires_in_ms if expires_in_ms is not None else "",
            "rev": "",
            "org": _lines(origins_n),
            "ipb": _lines(ips_bits),
            "ips": _lines(ips_shown),
            "mth": _lines(methods_n),
        }
        # Indexes first, record last: the key only works once it is complete.
        await self.redis.set(self._kid_key(key_id), khash)
        await self.redis.sadd(self._acct_keys_key(account.id), key_id)
        await self.redis.hset(record_key(self.prefix, khash), mapping=record)
        return key, self._record(record)

    async def key_hash_of(self, key_id: str) -> str:
        khash = await self.redis.get(self._kid_key(key_id)) if key_id.isprintable() else None
        if not khash:
            raise NotFound(f"no key with id {key_id!r}")
        return str(khash)

    async def get_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """The record; with ``account_id``, NotFound unless that account owns it."""
        khash = await self.key_hash_of(key_id)
        data = await self.redis.hgetall(record_key(self.prefix, khash))
        if not data or (account_id is not None and data.get("acct") != account_id):
            raise NotFound(f"no key with id {key_id!r}")
        return self._record(data)

    async def list_keys(self, account_id: str) -> list[KeyRecord]:
        key_ids = sorted(await self.redis.smembers(self._acct_keys_key(account_id)))
        records = []
        for key_id in key_ids:
            try:
                records.append(await self.get_key(key_id, account_id))
            except NotFound:
                continue
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records

    async def revoke_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """Revoke now. admit.lua reads the record on every call, so this is immediate."""
        record = await self.get_key(key_id, account_id)
        if record.revoked_at is not None:
            return record
        khash = await self.key_hash_of(key_id)
        now = await self.now_ms()
        await self.redis.hset(record_key(self.prefix, khash), "rev", now)
        await self.redis.hdel(bucket_key(self.prefix, khash), "t", "ts")
        return await self.get_key(key_id)

    async def rotate_key(
        self, key_id: str, grace_ms: int = 86_400_000, account_id: str | None = None
    ) -> tuple[str, KeyRecord]:
        """A new key with the same settings; the old one expires after ``grace_ms``."""
        old = await self.get_key(key_id, account_id)
        now = await self.now_ms()
        if old.status(now) != "active":
            raise StoreError(f"key {key_id} is {old.status(now)}; only active keys rotate")
        if grace_ms < 0:
            raise StoreError("the grace period cannot be negative")
        khash = await self.key_hash_of(key_id)
        remaining = old.expires_at - now if old.expires_at is not None else None
        key, new = await self.create_key(
            old.account,
            name=old.name,
            env=old.env,
            expires_in_ms=remaining,
            origins=old.origins,
            ips=old.ips,
            methods=old.methods,
        )
        new_expiry = now + grace_ms
        if old.expires_at is not None:
            new_expiry = min(new_expiry, old.expires_at)
        await self.redis.hset(
            record_key(self.prefix, khash), mapping={"exp": new_expiry, "rot": new.id}
        )
        if grace_ms == 0:
            await self.redis.hset(record_key(self.prefix, khash), "rev", now)
        return key, new

    def _record(self, d: Mapping[str, str]) -> KeyRecord:
        return KeyRecord(
            id=d["id"],
            account=d["acct"],
            name=d.get("name", ""),
            env=d.get("env", ""),
            plan=d.get("plan", self.default_plan),
            hint=d.get("hint", ""),
            created_at=int(d["created"]),
            expires_at=_opt_int(d.get("exp")),
            revoked_at=_opt_int(d.get("rev")),
            last_used_at=_opt_int(d.get("used")),
            origins=_split(d.get("org")),
            ips=_split(d.get("ips")),
            methods=_split(d.get("mth")),
            rotated_to=d.get("rot") or None,
        )

    # -- usage ---------------------------------------------------------------
    async def usage(
        self, key_id: str, since_ms: int = DAY_MS, account_id: str | None = None
    ) -> Usage:
        """Usage over the last ``since_ms`` (minutes kept 48 h, days 90)."""
        await self.get_key(key_id, account_id)
        khash = await self.key_hash_of(key_id)
        prefix = usage_prefix(self.prefix, khash)
        now = await self.now_ms()
        start = now - since_ms
        first_hour, last_hour = max(start, now - 48 * HOUR_MS) // HOUR_MS, now // HOUR_MS
        first_day, last_day = start // DAY_MS, now // DAY_MS
        pipe = self.redis.pipeline(transaction=False)
        hours = list(range(first_hour, last_hour + 1))
        days = list(range(first_day, last_day + 1))
        for hour in hours:
            pipe.hgetall(f"{prefix}h:{hour}")
        for day in days:
            pipe.hgetall(f"{prefix}d:{day}")
        replies = await pipe.execute()
        per_minute: list[tuple[int, int]] = []
        first_minute = start // MINUTE_MS
        for hour, data in zip(hours, replies[: len(hours)], strict=True):
            for minute in range(60):
                t = hour * HOUR_MS + minute * MINUTE_MS
                if first_minute <= t // MINUTE_MS <= now // MINUTE_MS:
                    per_minute.append((t, int(data.get(str(minute), 0))))
        per_day: list[tuple[int, dict[str, int]]] = []
        methods: dict[str, int] = {}
        sums = {"req": 0, "lim": 0, "den": 0, "err": 0, "cu": 0}
        for day, data in zip(days, replies[len(hours) :], strict=True):
            totals = {k: int(data.get(k, 0)) for k in sums}
            per_day.append((day * DAY_MS, totals))
            for k in sums:
                sums[k] += totals[k]
            for field_name, count in data.items():
                if field_name.startswith("m:"):
                    methods[field_name[2:]] = methods.get(field_name[2:], 0) + int(count)
        total = sum(n for _, n in per_minute) if since_ms <= 48 * HOUR_MS else sums["req"]
        return Usage(
            key_id=key_id,
            since_ms=start,
            until_ms=now,
            per_minute=per_minute,
            per_day=per_day,
            methods=dict(sorted(methods.items(), key=lambda kv: -kv[1])),
            total=total,
            limited=sums["lim"],
            denied=sums["den"],
            errors=sums["err"],
            compute_units=sums["cu"],
        )

    async def add_errors(self, counts: Mapping[str, int], now_ms: int | None = None) -> None:
        """Add upstream error counts per key hash (flushed in batches, off the hot path)."""
        if not counts:
            return
        now = now_ms if now_ms is not None else await self.now_ms()
        day = now // DAY_MS
        pipe = self.redis.pipeline(transaction=False)
        for khash, count in counts.items():
            day_key = f"{usage_prefix(self.prefix, khash)}d:{day}"
            pipe.hincrby(day_key, "err", count)
            pipe.pexpire(day_key, 91 * DAY_MS)
        await pipe.execute()

    # -- dashboard support -----------------------------------------------------
    # Server-side sessions and failure counters for the dashboard. They live
    # here so that every Redis key layout stays in this one module:
    #
    #     p:s:<sha256(session id)>   session hash: acct, csrf, created (TTL = max age)
    #     p:t:<name>                 fixed-window failure counter (TTL = window)
    #
    # Only the SHA-256 of a session id is stored, as for API keys: a Redis
    # dump does not hand out live sessions.

    def _session_key(self, session_id: str) -> str:
        return f"{self.prefix}:s:{hashlib.sha256(session_id.encode()).hexdigest()}"

    def _counter_key(self, name: str) -> str:
        return f"{self.prefix}:t:{name}"

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

    async def count_failure(self, name: str, window_ms: int) -> tuple[int, int]:
        """Add one to counter ``name``: (count in this window, ms until it resets)."""
        if self._hit_script is None:
            self._hit_script = self.redis.register_script(_HIT_LUA)
        count, ttl = await self._hit_script(keys=[self._counter_key(name)], args=[window_ms])
        return int(count), int(ttl)

    async def failures(self, name: str) -> tuple[int, int]:
        """(count, ms until reset) of counter ``name`` without changing it."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self._counter_key(name))
        pipe.pttl(self._counter_key(name))
        count, ttl = await pipe.execute()
        return int(count or 0), max(0, int(ttl))

    async def clear_failures(self, name: str) -> None:
        await self.redis.delete(self._counter_key(name))

    async def active_key_count(self, account_id: str) -> int:
        """Keys of the account that work now and were not rotated away."""
        now = await self.now_ms()
        return sum(
            1
            for r in await self.list_keys(account_id)
            if r.status(now) == "active" and r.rotated_to is None
        )


# KEYS[1] counter   ARGV[1] window in ms
# returns {count, ms until the window resets}
# INCR and PEXPIRE in one script: a counter can never be left without a TTL.
_HIT_LUA = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {n, redis.call('PTTL', KEYS[1])}
"""
