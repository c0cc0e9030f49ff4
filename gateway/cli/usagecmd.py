"""``gateway usage KEY_ID [--since DURATION] [--csv]``: a key's requests, by method, and its month.

Thin: wording only; the counts come from ``Store.usage`` and the month's
cost from ``keycaps.month_of_key``, shared with the dashboard's sums. ``--csv``
prints the export per day and method (``store.usageexport``) instead; with
``--json`` the same rows are the answer's ``days``.
"""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.keycaps import month_of_key
from gateway.cli.storecall import Command
from gateway.config import Config
from gateway.store.accounts import Store
from gateway.store.usageexport import export_usage, to_csv


def usage_command(args: argparse.Namespace, cfg: Config) -> Command:
    async def usage(store: Store) -> tuple[Any, str]:
        days = await export_usage(store, cfg, args.key_id, args.since)
        if args.csv:
            return days, to_csv(days).rstrip("\n")
        u = await store.usage(args.key_id, args.since)
        lines = [
            f"key {u.key_id}: {u.total} requests, {u.compute_units} compute units, "
            f"{u.limited} rate-limited, {u.error_answers} error answers, "
            f"{u.errors} upstream failures, {u.denied} denied"
        ]
        lines += [f"  {m:<40} {n}" for m, n in u.methods.items()]
        month, month_line = await month_of_key(store, cfg, args.key_id)
        return {**u.as_json(), "month": month, "days": days}, "\n".join([*lines, month_line])

    return usage
