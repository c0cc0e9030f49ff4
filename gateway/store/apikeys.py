"""API keys: create, list, rotate, revoke, and the allowlists they carry.

The key itself is shown once and never stored: Redis holds its SHA-256 (the
record's hash tag) and a hint. Revoked and expired records (and their
``p:i`` index) are deleted ``key_retention_ms`` after they stop working, and
an account keeps at most ``max_inactive_keys`` of them: history must not grow
without bound. Writes that span slots (a key and its indexes) are ordered so a
crash in between leaves nothing usable behind.

It stays whole because every writer of a key record (create, rotate, revoke,
the allowlists and their normalizers) must keep the same crash-safe order of
the key and its indexes, which is checkable only with the writers side by side.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from redis.exceptions import LockError

from gateway.identity.keys import generate_key, key_hash, key_hint
from gateway.limits.limiter import cidr_bits
from gateway.redis import keyspace as ks
from gateway.store import keycap
from gateway.store.core import NotFound, StoreCore, StoreError
from gateway.store.keyevents import publish_key_change
from gateway.store.records import Account, KeyRecord


def _opt_int(value: str | None) -> int | None:
    return int(value) if value else None


def _lines(values: Iterable[str]) -> str:
    """Allowlist entries as the ``\\n``-framed string admit.lua searches."""
    items = [v for v in values if v]
    return "\n" + "\n".join(items) + "\n" if items else ""


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v for v in (value or "").split("\n") if v)


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


class ApiKeys(StoreCore):
    """Key operations; ``account()`` comes from the Accounts mixin of the Store."""

    if TYPE_CHECKING:

        async def account(self, account_id: str) -> Account: ...

    def _cap(self, max_keys: int | None) -> int | None:
        return self.max_keys if max_keys is None else max_keys

    async def _check_cap(self, account_id: str, cap: int | None) -> None:
        """Refuse one more working key when the account already has ``cap``.

        Keys in a rotation grace period still work, so they count: rotating
        cannot be used to get more working keys than the cap.
        """
        if cap is None:
            return
        if await self.active_key_count(account_id) + 1 > cap:  # from the index: keycap
            raise StoreError(
                f"you already have {cap} active keys (keys in a rotation grace period "
                "count), the most an account may have; revoke one you no longer use "
                "first, or rotate with no grace period"
            )

    def _key_lock(self, account_id: str) -> Any:
        """Serialise key creation per account, so parallel requests cannot pass the cap."""
        return self.redis.lock(
            ks.account_lock(self.prefix, account_id), timeout=10, blocking_timeout=3, sleep=0.02
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
        pipe.set(ks.key_index(self.prefix, key_id), khash)
        pipe.sadd(ks.account_keys(self.prefix, account.id), key_id)
        keycap.add_working(pipe, self.prefix, account.id, key_id, exp)
        await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(ks.record_key(self.prefix, khash), mapping=record)
        if exp is not None:
            self._expire_at(pipe, key_id, khash, exp)
        await pipe.execute()
        return key, self._record(record)

    def _expire_at(self, pipe: Any, key_id: str, khash: str, stops_ms: int) -> None:
        """Queue the deletion of a key's record and index ``key_retention_ms`` after it stops."""
        gone = stops_ms + self.key_retention_ms
        pipe.pexpireat(ks.record_key(self.prefix, khash), gone)
        pipe.pexpireat(ks.key_index(self.prefix, key_id), gone)

    async def key_hash_of(self, key_id: str) -> str:
        khash = (
            await self.redis.get(ks.key_index(self.prefix, key_id))
            if key_id.isprintable()
            else None
        )
        if not khash:
            raise NotFound(f"no key with id {key_id!r}")
        return str(khash)

    async def get_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """The record; with ``account_id``, NotFound unless that account owns it."""
        return (await self._get_key(key_id, account_id))[1]

    async def _get_key(self, key_id: str, account_id: str | None) -> tuple[str, KeyRecord]:
        khash = await self.key_hash_of(key_id)
        data = await self.redis.hgetall(ks.record_key(self.prefix, khash))
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
        members = await self.redis.smembers(ks.account_keys(self.prefix, account_id))
        key_ids = sorted(members)
        if not key_ids:
            return []
        now = await self.now_ms()  # (a Cluster pipeline may not carry TIME)
        pipe = self.redis.pipeline(transaction=False)
        for key_id in key_ids:
            pipe.get(ks.key_index(self.prefix, key_id))
        hashes = dict(zip(key_ids, await pipe.execute(), strict=True))
        found = [(k, h) for k, h in hashes.items() if h]
        pipe = self.redis.pipeline(transaction=False)
        for _, khash in found:
            pipe.hgetall(ks.record_key(self.prefix, khash))
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
            pipe.srem(ks.account_keys(self.prefix, account_id), *(k for k, _ in gone))
            for key_id, khash in gone:
                if khash is not None:
                    pipe.delete(
                        ks.key_index(self.prefix, key_id), ks.record_key(self.prefix, khash)
                    )
            await pipe.execute()
        records = working + [r for r, _ in kept]
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records

    async def revoke_key(self, key_id: str, account_id: str | None = None) -> KeyRecord:
        """Revoke now, on every process: the record changes, then a pub/sub message
        drops every worker's cached copy (``store.keyevents``) and closes the key's
        WebSockets, so it stops working everywhere within milliseconds."""
        khash, record = await self._get_key(key_id, account_id)
        if record.revoked_at is not None:
            return record
        now = await self.now_ms()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(ks.record_key(self.prefix, khash), "rev", now)
        pipe.hdel(ks.bucket_key(self.prefix, khash), "t", "ts")
        self._expire_at(pipe, key_id, khash, now)
        keycap.drop_working(pipe, self.prefix, record.account, key_id)
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
                if old.rate_cap is not None or old.daily_cu_cap is not None or old.private_tx:
                    caps = {
                        "rcap": old.rate_cap or "",
                        "dcap": old.daily_cu_cap or "",
                        "ptx": old.private_tx,
                    }
                    pipe.hset(
                        ks.record_key(self.prefix, key_hash(key)), mapping=caps
                    )  # caps go too
                pipe.hset(
                    ks.record_key(self.prefix, khash), mapping={"exp": new_expiry, "rot": new.id}
                )
                if grace_ms == 0:
                    pipe.hset(ks.record_key(self.prefix, khash), "rev", now)
                    keycap.drop_working(pipe, self.prefix, account.id, key_id)
                else:
                    keycap.add_working(pipe, self.prefix, account.id, key_id, new_expiry)
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
            private_tx=d.get("ptx", ""),
        )

    async def active_key_count(self, account_id: str) -> int:
        """Keys of the account that work now, rotated ones in their grace period included.

        Counted from the account's index of working keys (``store.keycap``),
        not by reading every key's record.
        """
        now = await self.now_ms()
        return await keycap.working_count(
            self.redis, self.prefix, account_id, now, lambda: self.list_keys(account_id)
        )
