"""The argparse tree of the ``gateway`` command: every command, option and help text.

Options must be spelled out in full: ``--worker 2`` is an error, not a guess
at ``--workers`` (``_Parser``). ``--config`` is accepted before and after the
command. The larger sub-commands declare their own options next to their
bodies (``keycaps.add_limit_parser``, ``keytx.add_update_parser``).
"""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli import durations
from gateway.cli.keycaps import add_limit_parser
from gateway.cli.keytx import add_update_parser


def parse_duration_ms(text: str) -> int:
    """An argparse ``type=``: ``30d``, ``24h``, ``90m``, ``15s``, ``0`` -> milliseconds."""
    try:
        return durations.parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """No prefix matching of long options, in this parser and every subparser.

    argparse's default takes ``--worker 2`` as ``--workers 2`` and ``--conf``
    as ``--config``; an operator's typo must be an error instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rpc-gateway")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _duration(
    parser: argparse.ArgumentParser, flag: str, help: str, default: int | None = None
) -> None:
    """A ``DURATION`` option (``30d``, ``12h``, ...) held in milliseconds."""
    parser.add_argument(
        flag, type=parse_duration_ms, default=default, metavar="DURATION", help=help
    )


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gateway",
        description="Authenticated JSON-RPC gateway for BNB Smart Chain (56) and opBNB (204).",
        epilog="Start with `gateway serve --demo`: it runs everything locally, offline, "
        "and prints curl lines to try.",
    )
    parser.add_argument(
        "--config", help="TOML config file (default: $GATEWAY_CONFIG, else built-in defaults)"
    )
    parser.add_argument("--version", action="version", version=f"gateway {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve(sub)
    _config(sub)
    _accounts(sub)
    _keys(sub)

    usage = sub.add_parser("usage", help="show a key's usage")
    usage.add_argument("key_id")
    _duration(
        usage, "--since", "window (default 24h; minutes kept 48h, days 90d)", default=86_400_000
    )
    _json(usage)
    usage.add_argument(
        "--csv",
        action="store_true",
        help="print the usage per day and method as CSV (day,key_id,method,calls,units,"
        "rate_limited,errors; method '*' is the day's totals), for billing",
    )
    audit = sub.add_parser(
        "audit", help="show the admin API's audit log (every write: who, what, when), newest first"
    )
    audit.add_argument("--limit", type=int, default=50, metavar="N", help="entries (default 50)")
    _json(audit)
    _config_on_every_command(parser)
    return parser


_SERVE = (
    "Run the gateway. Without GATEWAY_REDIS_URL / "
    "redis.url an embedded Redis is started under the data dir."
)


def _serve(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the gateway", description=_SERVE)
    serve.add_argument(
        "--demo",
        action="store_true",
        help="offline demo: embedded Redis, two mock nodes, a demo key",
    )
    serve.add_argument("--host", help="listen address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default from config: 8545)")
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the port with SO_REUSEPORT (SIGHUP reloads the config)",
    )
    serve.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help='/metrics listener (default from config: 127.0.0.1:9464; "" for none)',
    )


def _config(sub: Any) -> None:
    config = sub.add_parser("config", help="check a config file").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    check = config.add_parser(
        "check",
        help="load a config as `serve` would and list every mistake, each with its path",
    )
    check.add_argument("file", nargs="?", help="TOML file (default: --config, $GATEWAY_CONFIG)")
    _json(check)


def _accounts(sub: Any) -> None:
    accounts = sub.add_parser("accounts", help="manage accounts").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = accounts.add_parser("list", help="list every account, oldest first")
    _json(listing)
    create = accounts.add_parser("create", help="create an account (password from stdin or prompt)")
    create.add_argument("email")
    create.add_argument("--plan", default=None, help="plan name (free or payg by default)")
    _json(create)
    setplan = accounts.add_parser("plan", help="switch an account's plan")
    setplan.add_argument("email")
    setplan.add_argument("plan")
    _json(setplan)

    reset = accounts.add_parser(
        "reset-password", help="print a one-time link (valid 1 h) to set a new password"
    )
    reset.add_argument("email")
    _json(reset)


def _keys(sub: Any) -> None:
    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    kc = keys.add_parser(
        "create", help="create a key; the key is printed once, on the last line of stdout"
    )
    kc.add_argument("--account", required=True, metavar="EMAIL")
    kc.add_argument("--name", default="", help="a label, e.g. the app's name")
    kc.add_argument("--env", default="", help="environment label (default production)")
    _duration(kc, "--expires-in", "e.g. 30d, 12h (default: never)")
    kc.add_argument(
        "--origin",
        action="append",
        default=[],
        help="allowed browser origin (repeatable; *.example.com for subdomains)",
    )
    kc.add_argument("--ip", action="append", default=[], help="allowed client IP/CIDR (repeatable)")
    kc.add_argument(
        "--method", action="append", default=[], help="allowed JSON-RPC method (repeatable)"
    )
    _json(kc)
    kl = keys.add_parser("list", help="list an account's keys")
    kl.add_argument("--account", required=True, metavar="EMAIL")
    _json(kl)
    kr = keys.add_parser("revoke", help="revoke a key now, on every gateway process")
    kr.add_argument("key_id")
    _json(kr)
    kt = keys.add_parser(
        "rotate",
        help="issue a new key with the same settings; the old "
        "one keeps working for the grace period",
    )
    kt.add_argument("key_id")
    _duration(
        kt,
        "--grace",
        "how long the old key still works (default 24h; 0 = revoke now)",
        default=86_400_000,
    )
    _json(kt)
    add_limit_parser(keys)
    add_update_parser(keys)


def _config_on_every_command(parser: argparse.ArgumentParser) -> None:
    """Accept ``--config`` after the command too (``gateway serve --config F``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    child.add_argument(
                        "--config",
                        default=argparse.SUPPRESS,
                        help="TOML config file (default: $GATEWAY_CONFIG)",
                    )
                _config_on_every_command(child)
