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
    p:a:{<acct>}:lock  held while a key of the account is created or rotated

Revoked and expired key records (and their ``p:i`` index) are deleted
``key_retention_ms`` after they stop working, and an account keeps at most
``max_inactive_keys`` of them: a key that no longer works is history, and
history must not grow without bound.

Every Redis key of one API key shares the ``{H}`` hash tag, so the hot path
runs on one Cluster slot. Writes that span slots (creating a key and its
indexes) are ordered so a crash in between leaves nothing usable behind.
Times are Redis ``TIME`` in ms, the same clock admit.lua uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import LockError

from gateway.limits.limiter import bucket_key, cidr_bits, record_key, usage_prefix
from gateway.rpc.auth import generate_key, key_hash, key_hint
from gateway.store.keyevents import publish_key_change

if TYPE_CHECKING:
    from gateway.config import Config

_T = TypeVar("_T")

RedisClient = Redis | RedisCluster

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
HASH_NICE = 10  # password hashing threads run this much nicer than the process (Linux)


class StoreError(Exception):
    """A store operation cannot be done; the message says why, for users."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Busy(StoreError):
    """Every password-hashing thread stayed busy for too long: try again soon."""


@dataclass(frozen=True, slots=True)
class AttemptCounter:
    """One fixed-window attempt counter of a throttle (see ``Store.take_attempt``)."""

    name: str  # short and printable; the Store adds prefix and hash tag
    limit: int
    window_ms: int
    skippable: bool = False  # not checked while the throttle's marker exists


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
    # The owner's caps (gateway/key_limits.py); None = the plan's.
    rate_cap: float | None = None
    daily_cu_cap: int | None = None

    def status(self, now_ms: int) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now_ms``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now_ms >= self.expires_at:
            return "expired"
        return "active"

    def stopped_at(self) -> int | None:
        """When the key stopped (or will stop) working; None for a key with no end."""
        if self.revoked_at is not None:
            return self.revoked_at
        return self.expires_at

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
            "rate_cap": self.rate_cap,
            "daily_cu_cap": self.daily_cu_cap,
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
        max_keys: int | None = None,
        key_retention_ms: int = 30 * DAY_MS,
        max_inactive_keys: int = 20,
        hash_threads: int = 2,
        hash_wait_s: float = 5.0,
    ) -> None:
        # redis-py's annotations do not model decode_responses=True (every
        # reply here is str), so the client is typed loosely on purpose.
        self.redis: Any = redis
        self.prefix = prefix
        self.plans = tuple(plans)
        self.default_plan = default_plan
        self.max_keys = max_keys  # None: no cap (tests, scripts)
        self.key_retention_ms = max(0, key_retention_ms)
        self.max_inactive_keys = max(0, max_inactive_keys)
        self._hasher = hasher or PasswordHasher()
        # argon2 takes ~100 ms of CPU and 64 MiB: it runs in threads of its
        # own, at most ``hash_threads`` at once and at a lower CPU priority,
        # so log-ins never stall the event loop and a log-in flood cannot
        # take every core from RPC traffic.
        self._hash_threads = max(1, hash_threads)
        self._hash_slots = asyncio.Semaphore(self._hash_threads)
        self._hash_wait_s = hash_wait_s
        self._hash_pool: ThreadPoolExecutor | None = None
        self._dummy_hash: str | None = None
        self._hit_script: AsyncScript | None = None  # dashboard support
        self._attempt_script: AsyncScript | None = None
        self._success_script: AsyncScript | None = None

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

    async def _hash_work(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run argon2 work ``fn(*args)`` in a thread, at most ``hash_threads`` at once.

        The slot is given back by the thread when the work is done, not when
        the awaiting request goes away: a client that disconnects mid-hash
        cannot make room for more parallel hashes than configured.
        """
        try:
            async with asyncio.timeout(self._hash_wait_s):
                await self._hash_slots.acquire()
        except TimeoutError:
            raise Busy("too many log-ins at once; try again in a few seconds") from None
        loop = asyncio.get_running_loop()
        slots = self._hash_slots

        def job() -> _T:
            try:
                return fn(*args)
            finally:
                # RuntimeError: the loop closed meanwhile (nothing waits any more)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(slots.release)

        if self._hash_pool is None:
            # Idle workers exit once the Store (and so this pool) is collected.
            self._hash_pool = ThreadPoolExecutor(
                self._hash_threads, thread_name_prefix="argon2", initializer=_lower_priority
            )
        return await asyncio.shield(loop.run_in_executor(self._hash_pool, job))

    async def hash_password(self, password: str) -> str:
        """An argon2 hash of ``password``, computed in the bounded hashing pool."""
        return await self._hash_work(self._hasher.hash, password)

    async def _dummy(self) -> str:
        """A hash with the current parameters, for emails that have no account."""
        if self._dummy_hash is None:
            self._dummy_hash = await self._hash_work(self._hasher.hash, secrets.token_hex(16))
        return self._dummy_hash

    def _verify(self, pw_hash: str, password: str) -> bool:
        try:
            return bool(self._hasher.verify(pw_hash, password))
        except (VerificationError, InvalidHashError):
            return False

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
        try:
            pw = await self._hash_work(self._hasher.hash, password)
        except BaseException:
            await self.redis.delete(self._email_key(email))  # give the email back
            raise
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
        """The account if the password is right, else None (same work either way).

        An email without an account is verified against a dummy hash with the
        same parameters, after the same two Redis reads, so timing does not
        tell which emails have accounts. argon2 runs off the event loop.
        """
        dummy = await self._dummy()
        try:
            account_id = await self.redis.get(self._email_key(normalize_email(email)))
        except StoreError:
            account_id = None
        data = await self.redis.hgetall(self._acct_key(account_id or "-"))
        pw_hash = data.get("pw") or ""
        ok = await self._hash_work(self._verify, pw_hash or dummy, password)
        if not (ok and pw_hash and account_id):
            return None
        return Account(data["id"], data["email"], data["plan"], int(data["created"]))

    async def set_plan(self, account_id: str, plan: str) -> Account:
        """Switch the account's plan; every key follows from its next request."""
        self._check_plan(plan)
        account = await self.account(account_id)
        await self.redis.hset(self._acct_key(account_id), "plan", plan)
        for key_id in await self.redis.smembers(self._acct_keys_key(account_id)):
            khash = await self.redis.get(self._kid_key(key_id))
            if khash:
                # Only the plan changes. The bucket (t, ts) stays: the admission
                # scripts clamp its level to the new plan's burst, so switching
                # plans back and forth never hands out a fresh full bucket.
                await self.redis.hset(record_key(self.prefix, khash), "plan", plan)
                await publish_key_change(self.redis, self.prefix, khash)
        return Account(account.id, account.email, plan, account.created_at)

    # -- keys ----------------------------------------------------------------
    def _cap(self, max_keys: int | None) -> int | None:
        return self.max_keys if max_keys is None else max_keys

    async def _check_cap(self, account_id: str, cap: int | None) -> None:
        """Refuse one more working key when the account already has ``cap``.

        Keys in a rotation grace period still work, so they count: rotating
        cannot be used to get more working keys than the cap.
        """
        if cap is None:
            return
        if await self.active_key_count(account_id) + 1 > cap:
            raise StoreError(
                f"you already have {cap} active keys (keys in a rotation grace period "
                "count), the most an account may have; revoke one you no longer use "
                "first, or rotate with no grace period"
            )

    def _key_lock(self, account_id: str) -> Any:
        """Serialise key creation per account, so parallel requests cannot pass the cap."""
        return self.redis.lock(
            f"{self._acct_key(account_id)}:lock", timeout=10, blocking_timeout=3, sleep=0.02
        )

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
        """Make a key; returns the key itself (shown once) and its record.

        ``max_keys`` overrides the Store's cap (``dashboard.max_keys_per_account``).
        """
        account = await self.account(account_id)
        origins_n = normalize_origins(origins)
        ips_shown, ips_bits = normalize_ips(ips)
        methods_n = normalize_methods(methods)
        if expires_in_ms is not None and expires_in_ms <= 0:
            raise StoreError("expiry must be in the future")
        cap = self._cap(max_keys)
        if cap is None:
            return await self._new_key(
                account, name, env, expires_in_ms, origins_n, ips_shown, ips_bits, methods_n
            )
        try:
            async with self._key_lock(account.id):
                await self._check_cap(account.id, cap)
                return await self._new_key(
                    account, name, env, expires_in_ms, origins_n, ips_shown, ips_bits, methods_n
                )
        except LockError:
            raise StoreError(
                "another change to this account's keys is running; try again"
            ) from None

    async def _new_key(
        self,
        account: Account,
        name: str,
        env: str,
        expires_in_ms: int | None,
        origins: tuple[str, ...],
        ips_shown: tuple[str, ...],
        ips_bits: tuple[str, ...],
        methods: tuple[str, ...],
    ) -> tuple[str, KeyRecord]:
        key = generate_key()
        khash = key_hash(key)
        key_id = "key_" + secrets.token_hex(6)
        now = await self.now_ms()
        exp = now + expires_in_ms if expires_in_ms is not None else None
        record: dict[str, Any] = {
            "id": key_id,
            "acct": account.id,
            "name": name.strip()[:64] or "default",
            "env": env.strip()[:32] or "production",
            "plan": account.plan,
            "hint": key_hint(key),
            "created": now,
            "exp": exp if exp is not None else "",
            "rev": "",
            "org": _lines(origins),
            "ipb": _lines(ips_bits),
            "ips": _lines(ips_shown),
            "mth": _lines(methods),
        }
        # Indexes first, record last: the key only works once it is complete.
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self._kid_key(key_id), khash)
        pipe.sadd(self._acct_keys_key(account.id), key_id)
        await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(record_key(self.prefix, khash), mapping=record)
        if exp is not None:
            self._expire_at(pipe, key_id, khash, exp)
        await pipe.execute()
        return key, self._record(record)

    def _expire_at(self, pipe: Any, key_id: str, khash: str, stops_ms: int) -> None:
        """Queue the deletion of a key's record and index ``key_retention_ms`` after it stops."""
        gone = stops_ms + self.key_retention_ms
        pipe.pexpireat(record_key(self.prefix, khash), gone)
        pipe.pexpireat(self._kid_key(key_id), gone)

    async def key_hash_of(self, key_id: str) -> str:
        khash = await self.redis.get(self._kid_key(key_id)) if key_id.isprintable() else None
        if not khash:
            raise NotFound(f"no key with id {key_id!r}")
        return str(khash)

    async def get_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """The record; with ``account_id``, NotFound unless that account owns it."""
        return (await self._get_key(key_id, account_id))[1]

    async def _get_key(self, key_id: str, account_id: str | None) -> tuple[str, KeyRecord]:
        khash = await self.key_hash_of(key_id)
        data = await self.redis.hgetall(record_key(self.prefix, khash))
        if not data.get("id") or (account_id is not None and data.get("acct") != account_id):
            raise NotFound(f"no key with id {key_id!r}")
        return khash, self._record(data)

    async def list_keys(self, account_id: str) -> list[KeyRecord]:
        """The account's keys, newest first: every working key and a bounded history.

        A fixed number of round trips however many keys the account ever
        made (members, then one pipeline of index reads, then one of
        records). Records past their retention, beyond ``max_inactive_keys``,
        or already expired by Redis are forgotten here, in one more pipeline.
        """
        members = await self.redis.smembers(self._acct_keys_key(account_id))
        key_ids = sorted(members)
        if not key_ids:
            return []
        now = await self.now_ms()  # (a Cluster pipeline may not carry TIME)
        pipe = self.redis.pipeline(transaction=False)
        for key_id in key_ids:
            pipe.get(self._kid_key(key_id))
        hashes = dict(zip(key_ids, await pipe.execute(), strict=True))
        found = [(k, h) for k, h in hashes.items() if h]
        pipe = self.redis.pipeline(transaction=False)
        for _, khash in found:
            pipe.hgetall(record_key(self.prefix, khash))
        datas = await pipe.execute() if found else []
        gone: list[tuple[str, str | None]] = [(k, None) for k, h in hashes.items() if not h]
        working: list[KeyRecord] = []
        stopped: list[tuple[KeyRecord, str]] = []
        for (key_id, khash), data in zip(found, datas, strict=True):
            if not data.get("id") or data.get("acct") != account_id:
                gone.append((key_id, None))  # a fragment; never delete what is not ours
                continue
            record = self._record(data)
            if record.status(now) == "active":
                working.append(record)
            else:
                stopped.append((record, khash))
        stopped.sort(key=lambda rk: rk[0].stopped_at() or 0, reverse=True)
        horizon = now - self.key_retention_ms
        kept = [
            rk
            for i, rk in enumerate(stopped)
            if i < self.max_inactive_keys and (rk[0].stopped_at() or 0) > horizon
        ]
        gone += [(r.id, h) for r, h in stopped if (r, h) not in kept]
        if gone:
            pipe = self.redis.pipeline(transaction=False)
            pipe.srem(self._acct_keys_key(account_id), *(k for k, _ in gone))
            for key_id, khash in gone:
                if khash is not None:
                    pipe.delete(self._kid_key(key_id), record_key(self.prefix, khash))
            await pipe.execute()
        records = working + [r for r, _ in kept]
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records

    async def revoke_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """Revoke now, on every process: the record changes, then a pub/sub message
        drops every worker's cached copy (``store.keyevents``), so the next call fails."""
        khash, record = await self._get_key(key_id, account_id)
        if record.revoked_at is not None:
            return record
        now = await self.now_ms()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(record_key(self.prefix, khash), "rev", now)
        pipe.hdel(bucket_key(self.prefix, khash), "t", "ts")
        self._expire_at(pipe, key_id, khash, now)
        await pipe.execute()
        # not in the pipeline: a Cluster pipeline refuses PUBLISH (it has no key)
        await publish_key_change(self.redis, self.prefix, khash)
        return await self.get_key(key_id)

    async def rotate_key(
        self,
        key_id: str,
        grace_ms: int = 86_400_000,
        account_id: str | None = None,
        max_keys: int | None = None,
    ) -> tuple[str, KeyRecord]:
        """A new key with the same settings; the old one expires after ``grace_ms``.

        With a grace period both keys work for a while, so the new one must
        fit under the cap; with ``grace_ms=0`` the old one is revoked at once.
        """
        if grace_ms < 0:
            raise StoreError("the grace period cannot be negative")
        khash, old = await self._get_key(key_id, account_id)
        account = await self.account(old.account)
        cap = self._cap(max_keys) if grace_ms > 0 else None
        try:
            async with self._key_lock(account.id):
                now = await self.now_ms()
                old = (await self._get_key(key_id, account_id))[1]  # fresh, under the lock
                if old.status(now) != "active":
                    raise StoreError(f"key {key_id} is {old.status(now)}; only active keys rotate")
                await self._check_cap(account.id, cap)
                remaining = old.expires_at - now if old.expires_at is not None else None
                key, new = await self._new_key(
                    account,
                    old.name,
                    old.env,
                    remaining,
                    old.origins,
                    *normalize_ips(old.ips),
                    old.methods,
                )
                new_expiry = now + grace_ms
                if old.expires_at is not None:
                    new_expiry = min(new_expiry, old.expires_at)
                pipe = self.redis.pipeline(transaction=False)
                if old.rate_cap is not None or old.daily_cu_cap is not None:
                    caps = {"rcap": old.rate_cap or "", "dcap": old.daily_cu_cap or ""}
                    pipe.hset(record_key(self.prefix, key_hash(key)), mapping=caps)  # caps go too
                pipe.hset(
                    record_key(self.prefix, khash), mapping={"exp": new_expiry, "rot": new.id}
                )
                if grace_ms == 0:
                    pipe.hset(record_key(self.prefix, khash), "rev", now)
                self._expire_at(pipe, key_id, khash, new_expiry)
                await pipe.execute()
                await publish_key_change(self.redis, self.prefix, khash)  # its expiry changed
                return key, new
        except LockError:
            raise StoreError(
                "another change to this account's keys is running; try again"
            ) from None

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
            rate_cap=float(d["rcap"]) if d.get("rcap") else None,
            daily_cu_cap=_opt_int(d.get("dcap")),
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

    def _attempt_key(self, name: str) -> str:
        # One hash tag for every log-in counter: the attempt script touches
        # several of them at once, which a Cluster allows only in one slot.
        return f"{self.prefix}:t:{{login}}:{name}"

    async def take_attempt(self, counters: Sequence[AttemptCounter], marker: str) -> int:
        """Count one attempt against every counter, unless one is already full.

        Returns 0 when the attempt was counted (go on and check the
        password), else the ms until the fullest counter resets (refuse, and
        count nothing). Checking and counting are one script call, so
        parallel attempts cannot all slip in before the first is counted.
        While ``marker`` exists, counters flagged ``skippable`` are neither
        checked nor able to refuse (they are still counted).
        """
        if self._attempt_script is None:
            self._attempt_script = self.redis.register_script(_ATTEMPT_LUA)
        keys = [self._attempt_key(c.name) for c in counters] + [self._attempt_key(marker)]
        args: list[Any] = [len(counters)]
        for c in counters:
            args += [max(1, c.limit), max(1, c.window_ms), int(c.skippable)]
        refused, wait_ms = await self._attempt_script(keys=keys, args=args)
        return max(1, int(wait_ms)) if int(refused) else 0

    async def attempt_succeeded(
        self, clear: str, refund: Sequence[str], marker: str, remember_ms: int
    ) -> None:
        """The password was right: clear ``clear``, give one attempt back to each
        of ``refund`` (a success is not a guess), and set ``marker`` for ``remember_ms``."""
        if self._success_script is None:
            self._success_script = self.redis.register_script(_SUCCESS_LUA)
        keys = [self._attempt_key(n) for n in (clear, marker, *refund)]
        await self._success_script(keys=keys, args=[max(1, remember_ms)])

    async def active_key_count(self, account_id: str) -> int:
        """Keys of the account that work now, rotated ones in their grace period included."""
        records = await self.list_keys(account_id)
        now = await self.now_ms()
        return sum(1 for r in records if counts_towards_cap(r, now))


def _lower_priority() -> None:
    """Make the calling (hashing) thread yield the CPU to the event loop.

    On Linux ``nice`` is per thread and argon2's own lane threads inherit it;
    elsewhere, or where it is not allowed, hashing simply runs at normal
    priority.
    """
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + HASH_NICE)
        )


def counts_towards_cap(record: KeyRecord, now_ms: int) -> bool:
    """A key that still works counts, also while a rotation's grace period runs."""
    return record.status(now_ms) == "active"


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

# KEYS[1..n] fixed-window counters   KEYS[n+1] marker
# ARGV[1] n, then per counter: limit, window ms, skippable (1 = not checked
#         while the marker exists)
# returns {0, 0} when the attempt was counted on every counter,
#         {1, ms until the fullest counter resets} when refused (nothing counted)
_ATTEMPT_LUA = """
local n = tonumber(ARGV[1])
local known = redis.call('EXISTS', KEYS[n + 1]) == 1
local wait = 0
for i = 1, n do
  local base = 3 * i - 1
  if not (known and ARGV[base + 2] == '1') then
    local count = tonumber(redis.call('GET', KEYS[i]) or '0')
    if count >= tonumber(ARGV[base]) then
      local ttl = redis.call('PTTL', KEYS[i])
      if ttl < 0 then
        ttl = tonumber(ARGV[base + 1])
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      if ttl > wait then wait = ttl end
    end
  end
end
if wait > 0 then
  return {1, wait}
end
for i = 1, n do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
  end
end
return {0, 0}
"""

# KEYS[1] counter to clear   KEYS[2] marker   KEYS[3..] counters to give one back
# ARGV[1] marker lifetime in ms
# DECR only a live, positive counter: it keeps its TTL and never goes negative.
_SUCCESS_LUA = """
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
for i = 3, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count > 0 then redis.call('DECR', KEYS[i]) end
end
return 0
"""
