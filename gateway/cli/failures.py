"""How a CLI command fails: one line on stderr, or one JSON object with ``--json``.

With ``--json`` a script reads stdout, so an error goes there as
``{"error": "...", "exit_code": N}`` (and the exit code is the same non-zero
one): a pipe into ``jq`` gets JSON in both cases, never a text line it
cannot parse.

``embedded_missing`` keeps the CLI from quietly starting an empty embedded
Redis (and creating its data dir in whatever folder it runs from) for a
command that can only read what is already there: without ``redis.url`` /
``GATEWAY_REDIS_URL`` and with no data dir yet, nothing could be found, and
the likely mistake is a missing URL (a running ``gateway serve --demo``
prints the one to use).
"""

from __future__ import annotations

import argparse
import sys

import orjson

from gateway.config import Config, data_dir

# Commands that make something new: they may start the embedded Redis (and
# its data dir) on a fresh machine, saying so.
_CREATING = {("accounts", "create"), ("keys", "create")}


def fail(args: argparse.Namespace | None, message: str, code: int) -> int:
    """Report ``message`` as the command's output format asks; return ``code``."""
    if args is not None and getattr(args, "json", False):
        sys.stdout.write(orjson.dumps({"error": message, "exit_code": code}).decode() + "\n")
        sys.stdout.flush()
    else:
        print(f"gateway: {message}", file=sys.stderr)
    return code


def embedded_missing(cfg: Config, args: argparse.Namespace) -> str | None:
    """Why this command must not start a fresh embedded Redis, or None if it may."""
    if cfg.redis.url:
        return None
    where = data_dir(cfg).resolve()
    if where.exists():
        return None
    if (args.command, getattr(args, "action", None)) in _CREATING:
        print(f"gateway: no redis.url; using an embedded Redis under {where}", file=sys.stderr)
        return None
    return (
        f"no Redis to read: redis.url / GATEWAY_REDIS_URL is not set and there is no "
        f"embedded Redis data under {where}. Set GATEWAY_REDIS_URL to your Redis (a "
        "running `gateway serve --demo` prints the one to use)"
    )
