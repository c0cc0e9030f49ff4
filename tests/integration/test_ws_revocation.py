"""Revocation, rotation and expiry close a key's sockets (4001) on every process;
SIGTERM drains: in-flight calls answered, then 1001 to every socket."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis

from gateway.demo.mockws import MockWsNode
from gateway.store.accounts import Store
from gateway.ws.service import WS
from tests.helpers.procs import gateway_processes
from tests.helpers.wsstack import WsStack, rpc

SUB = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}


@pytest.fixture
async def processes(
    tmp_path: Path, redis_url: str, prefix: str, ws_nodes: dict[str, list[MockWsNode]]
) -> AsyncIterator[list[int]]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        f'[redis]\nprefix = "{prefix}"\n'
        f'[networks.bsc]\nupstreams = ["{ws_nodes["bsc"][0].url}"]\n'
        f'[networks.opbnb]\nupstreams = ["{ws_nodes["opbnb"][0].url}"]\n'
        "[server]\naccess_log = false\ndrain_timeout_s = 10.0\n"
        "[dashboard]\nenabled = false\n"
    )
    # Waiting for readiness in a thread: the mock nodes live on this test's event
    # loop and must answer the gateways' start-up checks meanwhile.
    with ExitStack() as started:
        procs = gateway_processes(2, cfg, {"GATEWAY_REDIS_URL": redis_url})
        yield await asyncio.to_thread(started.enter_context, procs)


async def _closed(ws: aiohttp.ClientWebSocketResponse, wait_s: float) -> aiohttp.WSMessage:
    while True:
        msg = await asyncio.wait_for(ws.receive(), wait_s)
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            continue  # notifications in flight
        return msg


async def test_revoking_closes_the_keys_sockets_on_every_process_within_a_second(
    processes: list[int], http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, rec = await store.create_key(account)
    other, _ = await store.create_key(account)
    sockets = []
    for port in processes:
        for net in ("bsc", "opbnb"):
            ws = await http.ws_connect(f"ws://127.0.0.1:{port}/{net}/{key}")
            await rpc(ws, SUB)
            sockets.append(ws)
    bystander = await http.ws_connect(f"ws://127.0.0.1:{processes[0]}/bsc/{other}")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.revoke_key(rec.id)
    for ws in sockets:
        msg = await _closed(ws, 1.0)
        assert msg.type is aiohttp.WSMsgType.CLOSE
        assert msg.data == 4001 and "revoked" in str(msg.extra)
    assert loop.time() - started < 1.0
    assert (await rpc(bystander, {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId"}))["result"]
    await bystander.close()


async def test_rotation_without_grace_closes_and_with_grace_rearms_expiry(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, rec = await store.create_key(account)
    ws = await http.ws_connect(f"{stack.ws}/bsc/{key}")
    await store.rotate_key(rec.id, grace_ms=0)
    msg = await _closed(ws, 1.0)
    assert msg.data == 4001

    key2, rec2 = await store.create_key(account)
    ws2 = await http.ws_connect(f"{stack.ws}/bsc/{key2}")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.rotate_key(rec2.id, grace_ms=1200)
    msg = await _closed(ws2, 3.0)
    elapsed = loop.time() - started
    assert msg.data == 4001 and "expired" in str(msg.extra)
    assert 0.9 < elapsed < 2.2


async def test_expiry_closes_the_socket_on_time(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, expires_in_ms=1500)
    ws = await http.ws_connect(f"{stack.ws}/bsc/{key}")
    await rpc(ws, SUB)
    loop = asyncio.get_running_loop()
    started = loop.time()
    msg = await _closed(ws, 3.0)
    assert msg.data == 4001 and "expired" in str(msg.extra)
    assert loop.time() - started < 2.0


async def test_sigterm_answers_in_flight_calls_then_closes_with_1001(
    processes: list[int],
    http: aiohttp.ClientSession,
    api_key: str,
    ws_nodes: dict[str, list[MockWsNode]],
) -> None:
    port = processes[0]
    ws = await http.ws_connect(f"ws://127.0.0.1:{port}/bsc/{api_key}")
    await rpc(ws, SUB)
    idle = await http.ws_connect(f"ws://127.0.0.1:{port}/opbnb/{api_key}")
    ws_nodes["bsc"][0].delay_s = 1.0
    await ws.send_bytes(orjson.dumps({"jsonrpc": "2.0", "id": 77, "method": "eth_gasPrice"}))
    await asyncio.sleep(0.3)  # the call is at the node now
    pid = _pid_listening_on(port)
    os.kill(pid, signal.SIGTERM)
    answer = await _answer(ws, 77, 5.0)
    assert answer["result"] == "0x3b9aca00"
    for sock in (ws, idle):
        msg = await _closed(sock, 5.0)
        assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 1001


async def _answer(
    ws: aiohttp.ClientWebSocketResponse, ident: int, wait_s: float
) -> dict[str, object]:
    while True:
        msg = await asyncio.wait_for(ws.receive(), wait_s)
        assert msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), msg
        obj = orjson.loads(msg.data)
        if obj.get("id") == ident:
            return dict(obj)


def _pid_listening_on(port: int) -> int:
    """The pid of the gateway process serving ``port`` (from /proc, no ss/lsof needed)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return int(pid)
    raise AssertionError(f"no process listens on {port}")


async def test_a_lost_revocation_message_is_caught_by_the_recheck(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str, redis: Redis
) -> None:
    from gateway.redis.keyspace import record_key
    from gateway.rpc.auth import key_hash

    key, _ = await store.create_key(account)
    ws = await http.ws_connect(f"{stack.ws}/bsc/{key}")
    await rpc(ws, SUB)
    # Revoked behind pub/sub's back (as if the message were lost): no PUBLISH.
    await redis.hset(record_key(store.prefix, key_hash(key)), "rev", "1")
    await stack.app[WS].recheck_all()
    msg = await _closed(ws, 2.0)
    assert msg.data == 4001
