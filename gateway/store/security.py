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

``SecurityStore`` is composed of the session list (sessionlist.py), the
two-step log-in (twofactor.py) and the reset links (resetlinks.py) over one
core (securitycore.py); passwords and account deletion are here. The layout
above is theirs together, so it is written down once, here.
"""

from __future__ import annotations

import asyncio
import secrets

from gateway.redis import keyspace as ks
from gateway.store.accounts import Account, NotFound, StoreError
from gateway.store.resetlinks import ResetLinks
from gateway.store.sessionlist import SessionList
from gateway.store.twofactor import TwoFactor

MIN_PASSWORD = 8
MAX_PASSWORD = 1024
# Fields of a key record that say who owned it or what it was for; an
# erased account's records keep only id, plan, times and state (billing).
_PERSONAL_KEY_FIELDS = ("name", "env", "hint", "org", "ips", "ipb", "mth", "used")


class SecurityStore(SessionList, TwoFactor, ResetLinks):
    """Security operations on top of the shared ``Store`` (same Redis, same prefix)."""

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
            ks.account_keys(self.prefix, account.id),
            ks.account_working(self.prefix, account.id),
            # its webhooks (URLs, signing secrets) and alert rules; queued
            # deliveries find their webhook gone and are dropped
            ks.alert_webhooks(self.prefix, account.id),
            ks.alert_rules(self.prefix, account.id),
        )
        await self.redis.srem(ks.alert_accounts(self.prefix), account.id)
        return revoked

    async def _revoke_all(self, account_id: str) -> int:
        records = await self.store.list_keys(account_id)
        live = [r for r in records if r.revoked_at is None]
        await asyncio.gather(*(self.store.revoke_key(r.id, account_id) for r in live))
        return len(live)
