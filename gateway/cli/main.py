"""The ``gateway`` command: serve, config check, accounts, keys, usage.

Every operator command reads the same config as the server (``--config`` /
``GATEWAY_CONFIG``, ``GATEWAY_REDIS_URL``) and prints JSON with ``--json``.
Errors go to stderr as one line (with ``--json``: a JSON object on stdout,
see ``gateway.cli.failures``), with a non-zero exit, and say what to do
next: 1 the request was wrong (no such key), 2 the config is wrong, 3 Redis
cannot be reached or refused our password. Never a traceback, never a
password (URLs are shown without their credentials). Options must be spelled
out in full: ``--worker 2`` is an error, not a guess at ``--workers``.

It stays whole because the argument parser (``build_parser``, a third of the
file) and the dispatch of each command onto it change together; the larger
commands' bodies already live in their own modules (configcheck, keycaps,
accountlist, security).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    RedisClusterException,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.cli import durations
from gateway.cli.accountlist import list_accounts
from gateway.cli.failures import embedded_missing, fail
from gateway.cli.keycaps import add_limit_parser, limit_command, month_of_key
from gateway.cli.keytx import add_update_parser, update_command
from gateway.config import Config, ConfigError, data_dir, listen_address, load_config
from gateway.redis.clients import admin_connect
from gateway.redis.embedded import RedisProcess, ensure_embedded
from gateway.store.accounts import Store, StoreError

EXIT_REDIS = 3


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

    serve = sub.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway. Without GATEWAY_REDIS_URL / "
        "redis.url an embedded Redis is started under the data dir.",
    )
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

    config = sub.add_parser("config", help="check a config file").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    check = config.add_parser(
        "check",
        help="load a config as `serve` would and list every mistake, each with its path",
    )
    check.add_argument("file", nargs="?", help="TOML file (default: --config, $GATEWAY_CONFIG)")
    check.add_argument("--json", action="store_true", help="print JSON")

    accounts = sub.add_parser("accounts", help="manage accounts").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = accounts.add_parser("list", help="list every account, oldest first")
    listing.add_argument("--json", action="store_true", help="print JSON")
    create = accounts.add_parser("create", help="create an account (password from stdin or prompt)")
    create.add_argument("email")
    create.add_argument("--plan", default=None, help="plan name (free or payg by default)")
    create.add_argument("--json", action="store_true", help="print JSON")
    setplan = accounts.add_parser("plan", help="switch an account's plan")
    setplan.add_argument("email")
    setplan.add_argument("plan")
    setplan.add_argument("--json", action="store_true", help="print JSON")

    reset = accounts.add_parser(
        "reset-password", help="print a one-time link (valid 1 h) to set a new password"
    )
    reset.add_argument("email")
    reset.add_argument("--json", action="store_true", help="print JSON")

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    kc = keys.add_parser(
        "create", help="create a key; the key is printed once, on the last line of stdout"
    )
    kc.add_argument("--account", required=True, metavar="EMAIL")
    kc.add_argument("--name", default="", help="a label, e.g. the app's name")
    kc.add_argument("--env", default="", help="environment label (default production)")
    kc.add_argument(
        "--expires-in",
        type=parse_duration_ms,
        metavar="DURATION",
        help="e.g. 30d, 12h (default: never)",
    )
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
    kc.add_argument("--json", action="store_true", help="print JSON")
    kl = keys.add_parser("list", help="list an account's keys")
    kl.add_argument("--account", required=True, metavar="EMAIL")
    kl.add_argument("--json", action="store_true", help="print JSON")
    kr = keys.add_parser("revoke", help="revoke a key now, on every gateway process")
    kr.add_argument("key_id")
    kr.add_argument("--json", action="store_true", help="print JSON")
    kt = keys.add_parser(
        "rotate",
        help="issue a new key with the same settings; the old "
        "one keeps working for the grace period",
    )
    kt.add_argument("key_id")
    kt.add_argument(
        "--grace",
        type=parse_duration_ms,
        default=86_400_000,
        metavar="DURATION",
        help="how long the old key still works (default 24h; 0 = revoke now)",
    )
    kt.add_argument("--json", action="store_true", help="print JSON")
    add_limit_parser(keys)
    add_update_parser(keys)

    usage = sub.add_parser("usage", help="show a key's usage")
    usage.add_argument("key_id")
    usage.add_argument(
        "--since",
        type=parse_duration_ms,
        default=86_400_000,
        metavar="DURATION",
        help="window (default 24h; minutes kept 48h, days 90d)",
    )
    usage.add_argument("--json", action="store_true", help="print JSON")
    _config_on_every_command(parser)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "config":
        return _config_check(args.file or args.config, json_out=args.json)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(args, f"config error: {exc}", 2)
    if args.command == "serve":
        from gateway.server.runner import serve

        if args.metrics_listen and listen_address(args.metrics_listen) is None:
            print("gateway: --metrics-listen: expected HOST:PORT", file=sys.stderr)
            return 2
        config_path = args.config
        return serve(
            cfg,
            demo=args.demo,
            host=args.host,
            port=args.port,
            workers=args.workers,
            metrics_listen=args.metrics_listen,
            reload=lambda: load_config(config_path),
        )
    missing = embedded_missing(cfg, args)
    if missing is not None:
        return fail(args, missing, 1)
    try:
        return _run_store_command(cfg, args, _command(args, cfg))
    except StoreError as exc:
        return fail(args, str(exc), 1)
    except KeyboardInterrupt:  # pragma: no cover
        return 130


Command = Callable[[Store], Awaitable[tuple[Any, str]]]


def _command(args: argparse.Namespace, cfg: Config) -> Command:
    """The store call for an operator command: returns (json value, human text)."""
    if args.command == "accounts" and args.action == "list":
        return list_accounts
    if args.command == "accounts" and args.action == "create":
        password = _read_password()

        async def create_account(store: Store) -> tuple[Any, str]:
            acct = await store.create_account(args.email, password, args.plan)
            value = {
                "id": acct.id,
                "email": acct.email,
                "plan": acct.plan,
                "created_at": acct.created_at,
            }
            return value, f"account {acct.id} created for {acct.email} (plan {acct.plan})"

        return create_account
    if args.command == "accounts" and args.action == "plan":

        async def set_plan(store: Store) -> tuple[Any, str]:
            acct = await store.account_by_email(args.email)
            acct = await store.set_plan(acct.id, args.plan)
            return {
                "id": acct.id,
                "email": acct.email,
                "plan": acct.plan,
            }, f"{acct.email} is now on plan {acct.plan}"

        return set_plan
    if args.command == "accounts" and args.action == "reset-password":
        from gateway.cli.security import reset_password_command

        return reset_password_command(args.email, cfg)
    if args.command == "keys" and args.action == "limit":
        return limit_command(args, cfg)
    if args.command == "keys" and args.action == "update":
        return update_command(args)
    if args.command == "keys":
        return _keys_command(args)

    async def usage(store: Store) -> tuple[Any, str]:
        u = await store.usage(args.key_id, args.since)
        lines = [
            f"key {u.key_id}: {u.total} requests, {u.compute_units} compute units, "
            f"{u.limited} rate-limited, {u.errors} errors, {u.denied} denied"
        ]
        lines += [f"  {m:<40} {n}" for m, n in u.methods.items()]
        month, month_line = await month_of_key(store, cfg, args.key_id)
        return {**u.as_json(), "month": month}, "\n".join([*lines, month_line])

    return usage


def _keys_command(args: argparse.Namespace) -> Command:
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


def _config_check(path: str | None, *, json_out: bool) -> int:
    from gateway.cli.configcheck import check

    name = path or os.environ.get("GATEWAY_CONFIG") or "(built-in defaults)"
    cfg, problems = check(path)
    if json_out:
        value = {"file": name, "ok": not problems, "errors": problems}
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif problems:
        for problem in problems:
            print(f"gateway: config error: {problem}", file=sys.stderr)
    else:
        assert cfg is not None
        upstreams = sum(len(n.upstreams) for n in cfg.networks)
        redis = _safe_url(cfg.redis.url) if cfg.redis.url else "embedded"
        print(
            f"{name}: ok ({len(cfg.networks)} networks, {upstreams} upstreams, "
            f"redis {redis}, {cfg.server.workers} worker(s) on "
            f"{cfg.server.host}:{cfg.server.port})"
        )
    return 2 if problems else 0


def _read_password() -> str:
    if sys.stdin is not None and not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    return getpass.getpass("Password: ")


def redis_failure(exc: BaseException, url: str) -> str:
    """One line for the operator: what failed, where, and what to do about it."""
    where = f"Redis at {_safe_url(url)}" if url else "the embedded Redis"
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return (
            f"{where} refused our credentials ({_first_line(exc)}); put the right "
            "password in redis.url or GATEWAY_REDIS_URL (redis://:PASSWORD@host:port)"
        )
    if isinstance(exc, RedisTimeoutError):
        return (
            f"{where} did not answer in time; check that it is up and not overloaded, "
            "and that redis.url / GATEWAY_REDIS_URL points at it"
        )
    if isinstance(exc, RedisConnectionError | OSError):
        return (
            f"cannot connect to {where} ({_first_line(exc)}); start Redis or fix "
            "redis.url / GATEWAY_REDIS_URL"
        )
    return f"{where} failed the command ({type(exc).__name__}: {_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return "".join(c if c.isprintable() else "?" for c in line)[:200]


def _safe_url(url: str) -> str:
    """``url`` without its password (and user): safe for a terminal or a log."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<redis.url>"
    if ":" in host:
        host = f"[{host}]"
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _run_store_command(cfg: Config, args: argparse.Namespace, command: Command) -> int:
    url = cfg.redis.url
    try:
        value, text = asyncio.run(_store_call(cfg, command))
    except (RedisError, RedisClusterException, OSError) as exc:
        return fail(args, redis_failure(exc, url), EXIT_REDIS)
    if args.json:
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0


async def _store_call(cfg: Config, command: Command) -> tuple[Any, str]:
    url, proc = cfg.redis.url, None
    if not url:
        url, proc = ensure_embedded(data_dir(cfg))
    redis = admin_connect(cfg.redis, url)
    try:
        return await command(Store.from_config(redis, cfg))
    finally:
        await redis.aclose()
        if proc is not None:
            _stop(proc)


def _stop(proc: RedisProcess) -> None:
    proc.stop()
    url_file = proc.data_dir / "redis.url" if proc.data_dir else None
    if url_file is not None and url_file.exists():
        os.unlink(url_file)


if __name__ == "__main__":
    sys.exit(main())
