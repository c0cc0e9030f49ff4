"""Running one operator command against the store, and Redis failures in words.

Each command is a ``Command``: a store call returning (JSON value, human
text). This opens Redis (the configured URL, else the embedded one, stopped
again afterwards), runs it, prints the JSON (``--json``) or the text, and
turns any Redis failure into one line that says what to do (exit 3). URLs
are shown without their credentials (``safe_url``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
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

from gateway.cli.failures import fail
from gateway.config import Config, data_dir
from gateway.redis.clients import admin_connect
from gateway.redis.embedded import RedisProcess, ensure_embedded
from gateway.store.accounts import Store

EXIT_REDIS = 3

Command = Callable[[Store], Awaitable[tuple[Any, str]]]


def redis_failure(exc: BaseException, url: str) -> str:
    """One line for the operator: what failed, where, and what to do about it."""
    where = f"Redis at {safe_url(url)}" if url else "the embedded Redis"
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


def safe_url(url: str) -> str:
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


def run_store_command(cfg: Config, args: argparse.Namespace, command: Command) -> int:
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
