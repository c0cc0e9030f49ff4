"""Every account, oldest first, with its plan and key count: ``gateway accounts list``, admin API.

Accounts are found through their email index (``p:e:<email>``), walked with
``SCAN`` (never ``KEYS``, which blocks Redis), on every primary of a Redis
Cluster. The list is for an operator's terminal, not a hot path.
"""

from __future__ import annotations

from typing import Any

from gateway.redis import keyspace as ks
from gateway.store.accounts import NotFound, Store

_SCAN_COUNT = 500


async def list_accounts(store: Store) -> tuple[list[dict[str, Any]], str]:
    """(JSON rows, text) of every account."""
    redis = store.redis
    pattern = ks.email(store.prefix, "*")
    ids: set[str] = set()
    async for name in redis.scan_iter(match=pattern, count=_SCAN_COUNT):
        account_id = await redis.get(name)
        if account_id:
            ids.add(account_id)
    rows = []
    for account_id in ids:
        try:
            acct = await store.account(account_id)
        except NotFound:  # deleted between the scan and now
            continue
        keys = int(await redis.scard(ks.account_keys(store.prefix, account_id)))
        rows.append(
            {
                "id": acct.id,
                "email": acct.email,
                "plan": acct.plan,
                "created_at": acct.created_at,
                "keys": keys,
            }
        )
    rows.sort(key=lambda r: (r["created_at"], r["email"]))
    text = "\n".join(
        f"{r['id']}  {r['plan']:<8} {r['keys']:>3} key{'' if r['keys'] == 1 else 's'}  {r['email']}"
        for r in rows
    )
    return rows, text or "no accounts"
