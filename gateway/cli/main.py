"""The ``gateway`` command: serve, config check, accounts, keys, usage, audit.

Every operator command reads the same config as the server (``--config`` /
``GATEWAY_CONFIG``, ``GATEWAY_REDIS_URL``) and prints JSON with ``--json``.
Errors go to stderr as one line (with ``--json``: a JSON object on stdout,
see ``gateway.cli.failures``), with a non-zero exit, and say what to do
next: 1 the request was wrong (no such key), 2 the config is wrong, 3 Redis
cannot be reached or refused our password. Never a traceback, never a
password (URLs are shown without their credentials). Options must be spelled
out in full: ``--worker 2`` is an error, not a guess at ``--workers``.

This module only dispatches: the argument tree is in ``parser``, each
command group in a module of its own (servecmd, configcmd, accountcmds,
keycmds, usagecmd, auditcmd), and the Redis round trip with its failures in
``storecall``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway.cli.accountcmds import account_command
from gateway.cli.auditcmd import audit_command
from gateway.cli.failures import embedded_missing, fail
from gateway.cli.keycmds import key_command
from gateway.cli.parser import build_parser
from gateway.cli.storecall import Command, run_store_command
from gateway.cli.usagecmd import usage_command
from gateway.config import Config, ConfigError, load_config
from gateway.store.accounts import StoreError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "config":
        from gateway.cli.configcmd import config_check_command

        return config_check_command(args.file or args.config, json_out=args.json)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(args, f"config error: {exc}", 2)
    if args.command == "serve":
        from gateway.cli.servecmd import serve_command

        return serve_command(args, cfg)
    missing = embedded_missing(cfg, args)
    if missing is not None:
        return fail(args, missing, 1)
    try:
        return run_store_command(cfg, args, _command(args, cfg))
    except StoreError as exc:
        return fail(args, str(exc), 1)
    except KeyboardInterrupt:  # pragma: no cover
        return 130


def _command(args: argparse.Namespace, cfg: Config) -> Command:
    """The store call for an operator command: returns (json value, human text)."""
    if args.command == "accounts":
        return account_command(args, cfg)
    if args.command == "keys":
        return key_command(args, cfg)
    if args.command == "audit":
        return audit_command(args, cfg)
    return usage_command(args, cfg)


if __name__ == "__main__":
    sys.exit(main())
