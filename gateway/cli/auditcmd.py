"""``gateway audit [--json] [--limit N]``: the admin API's audit log, newest first.

One line per write: when (UTC), who (the admin token's name), what, the
target and the answer's status. The log itself is gateway/store/audit.py.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gateway.cli.storecall import Command
from gateway.config import Config
from gateway.store.accounts import Store, StoreError
from gateway.store.audit import MAX_LIST, AuditLog


def audit_command(args: argparse.Namespace, cfg: Config) -> Command:
    if not 1 <= args.limit <= MAX_LIST:
        raise StoreError(f"--limit: between 1 and {MAX_LIST}")

    async def show(store: Store) -> tuple[Any, str]:
        rows = await AuditLog(store.redis, store.prefix, cfg.admin.audit_cap).recent(args.limit)
        return rows, "\n".join(_line(r) for r in rows) or "no audit entries"

    return show


def _line(row: dict[str, Any]) -> str:
    at = row.get("at", 0)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at / 1000)) if at else "?"
    return (
        f"{stamp}  {row.get('who', '?'):<16} {row.get('action', '?'):<16} "
        f"{row.get('target', '')}  {row.get('status', '')}"
    )
