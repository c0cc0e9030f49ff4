"""``gateway keys create|list|revoke|rotate|limit|update``: the operator's key commands.

Thin: wording only; the checks live in gateway/store. A new key (``create``,
``rotate``) is printed once, on the last line of the human output, since
only its hash is kept. ``limit`` and ``update`` have modules of their own
(keycaps, keytx), shared wording with the dashboard.
"""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.keycaps import limit_command
from gateway.cli.keytx import update_command
from gateway.cli.storecall import Command
from gateway.config import Config
from gateway.store.accounts import Store


def key_command(args: argparse.Namespace, cfg: Config) -> Command:
    """The store call for ``gateway keys ACTION``."""
    if args.action == "limit":
        return limit_command(args, cfg)
    if args.action == "update":
        return update_command(args)
    if args.action == "create":

        async def create(store: Store) -> tuple[Any, str]:
            acct = await store.account_by_email(args.account)
            key, rec = await store.create_key(
                acct.id,
                name=args.name,
                env=args.env,
                expires_in_ms=args.expires_in,
                origins=args.origin,
                ips=args.ip,
                methods=args.method,
            )
            value = {**rec.as_json(await store.now_ms()), "key": key}
            return value, (
                f"key {rec.id} ({rec.name}, {rec.env}) for {acct.email}; "
                f"store it now, it is not shown again:\n{key}"
            )

        return create
    if args.action == "list":

        async def list_keys(store: Store) -> tuple[Any, str]:
            acct = await store.account_by_email(args.account)
            now = await store.now_ms()
            recs = await store.list_keys(acct.id)
            rows = [f"{r.id}  {r.status(now):<8} {r.hint}  {r.name} ({r.env})" for r in recs]
            return [r.as_json(now) for r in recs], "\n".join(rows) or "no keys"

        return list_keys
    if args.action == "revoke":

        async def revoke(store: Store) -> tuple[Any, str]:
            rec = await store.revoke_key(args.key_id)
            return rec.as_json(await store.now_ms()), f"key {rec.id} revoked"

        return revoke

    async def rotate(store: Store) -> tuple[Any, str]:
        key, rec = await store.rotate_key(args.key_id, args.grace)
        value = {**rec.as_json(await store.now_ms()), "key": key, "replaces": args.key_id}
        return value, (
            f"key {rec.id} replaces {args.key_id} (old key works for "
            f"{args.grace // 1000} s more); store it now:\n{key}"
        )

    return rotate
