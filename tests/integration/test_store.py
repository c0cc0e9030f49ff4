"""The account / key / usage store against a real Redis."""

from __future__ import annotations

import pytest

from gateway.config import config_from_dict
from gateway.limits.limiter import ADMIT_LUA, ExactLimiter, RedisScript, Status
from gateway.rpc.auth import key_hash, well_formed
from gateway.store.accounts import AlreadyExists, NotFound, Store, StoreError


async def test_accounts_and_passwords(store: Store) -> None:
    acct = await store.create_account("Ann@Example.com ", "long enough pw", "payg")
    assert acct.email == "ann@example.com" and acct.plan == "payg"
    with pytest.raises(AlreadyExists):
        await store.create_account("ann@example.com", "another password")
    assert (await store.verify_password("ANN@example.com", "long enough pw")) == acct
    assert await store.verify_password("ann@example.com", "wrong password") is None
    assert await store.verify_password("nobody@example.com", "long enough pw") is None
    for bad in ("not-an-email", "a@b", ""):
        with pytest.raises(StoreError):
            await store.create_account(bad, "long enough pw")
    with pytest.raises(StoreError):
        await store.create_account("short@example.com", "short")
    with pytest.raises(StoreError):
        await store.create_account("plan@example.com", "long enough pw", "gold")


async def test_password_is_stored_as_argon2(store: Store, redis: object) -> None:
    acct = await store.create_account("hash@example.com", "my secret password")
    pw = await store.redis.hget(f"{store.prefix}:a:{{{acct.id}}}", "pw")
    assert pw.startswith("$argon2") and "my secret password" not in pw


async def test_key_lifecycle(store: Store, account: str) -> None:
    key, rec = await store.create_key(
        account,
        name="web",
        env="staging",
        origins=["https://A.example/"],
        ips=["10.0.0.0/8"],
        methods=["eth_call"],
    )
    assert well_formed(key) and rec.hint == f"{key[:4]}…{key[-4:]}"
    assert rec.origins == ("https://a.example",) and rec.ips == ("10.0.0.0/8",)
    now = await store.now_ms()
    assert rec.status(now) == "active"
    listed = await store.list_keys(account)
    assert [r.id for r in listed] == [rec.id]
    revoked = await store.revoke_key(rec.id)
    assert revoked.status(now) == "revoked" and revoked.revoked_at is not None


async def test_rotate_keeps_settings_and_gives_grace(
    store: Store, account: str, redis: object, prefix: str
) -> None:
    limiter = ExactLimiter(RedisScript(store.redis, ADMIT_LUA), config_from_dict({}).plans, prefix)
    old_key, old = await store.create_key(account, name="app", env="prod", methods=["eth_call"])
    new_key, new = await store.rotate_key(old.id, grace_ms=60_000)
    assert new_key != old_key and (new.name, new.env, new.methods) == ("app", "prod", ("eth_call",))
    now = await store.now_ms()
    old_now = await store.get_key(old.id)
    assert old_now.rotated_to == new.id
    assert old_now.expires_at is not None and 59_000 < old_now.expires_at - now <= 60_000
    for key, at, want in [
        (old_key, now, Status.ADMITTED),
        (old_key, now + 61_000, Status.UNAUTHORIZED),
        (new_key, now + 61_000, Status.ADMITTED),
    ]:
        d = await limiter.admit(key_hash(key), 1, {"eth_call": 1}, now_ms=at)
        assert d.status is want
    with pytest.raises(StoreError):
        await store.rotate_key((await store.revoke_key(new.id)).id)


async def test_other_accounts_cannot_touch_a_key(store: Store, account: str) -> None:
    other = await store.create_account("other@example.com", "long enough pw")
    _, rec = await store.create_key(account)
    for call in (
        store.get_key(rec.id, other.id),
        store.revoke_key(rec.id, other.id),
        store.rotate_key(rec.id, 0, other.id),
        store.usage(rec.id, account_id=other.id),
    ):
        with pytest.raises(NotFound):
            await call
    assert (await store.get_key(rec.id)).revoked_at is None


async def test_key_count_cap_counts_active_keys(store: Store, account: str) -> None:
    recs = [(await store.create_key(account, max_keys=2))[1] for _ in range(2)]
    with pytest.raises(StoreError, match="revoke"):
        await store.create_key(account, max_keys=2)
    await store.revoke_key(recs[0].id)
    await store.create_key(account, max_keys=2)  # a revoked key frees its slot


async def test_bad_allowlist_entries_are_named(store: Store, account: str) -> None:
    with pytest.raises(StoreError, match=r"300\.1\.1\.1"):
        await store.create_key(account, ips=["300.1.1.1"])
    with pytest.raises(StoreError, match="eth call"):
        await store.create_key(account, methods=["eth call"])


async def test_error_counts_flush_into_usage(store: Store, account: str) -> None:
    key, rec = await store.create_key(account)
    await store.add_errors({key_hash(key): 3})
    assert (await store.usage(rec.id)).errors == 3
    await store.add_errors({}, answers={key_hash(key): 2})  # node error answers, apart
    usage = await store.usage(rec.id)
    assert (usage.errors, usage.error_answers) == (3, 2)
    assert usage.as_json()["error_answers"] == 2
