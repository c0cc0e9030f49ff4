"""Limits on sockets: notification budget, caps, slow readers, frame size, heartbeats."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway import typedefs as T
from gateway.demo.mockws import MockWsNode
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS
from gateway.ws.service import WS
from tests.helpers.config import MakeConfig
from tests.helpers.served import served
from tests.helpers.wsstack import WsStack, eventually, notes, rpc

SUB_HEADS = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}


def _metric(stack: WsStack, name: str, **labels: str) -> float:
    value = stack.app[METRICS].registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture
def ws_raw() -> dict[str, Any]:
    return {
        "plans": {
            "free": {"rate": 2, "burst": 5, "ws_max_sockets": 2, "ws_max_subscriptions": 2},
            "payg": {"rate": 100000, "burst": 100000},
        },
        "ws": {
            "charge_interval_s": 0.05,
            "send_queue_bytes": 65536,
            "max_message_bytes": 4096,
        },
    }


@pytest.mark.parametrize(
    "methods",
    [
        (),
        # Once, the charge was refused by this allowlist and read as a 1 ms
        # pause, so such a key's notifications were free and unlimited. A charge
        # meters what the gateway sent: no allowlist has a say in it.
        ("eth_subscribe", "eth_unsubscribe"),
    ],
)
async def test_notifications_cost_units_and_beyond_the_budget_are_dropped_and_counted(
    stack: WsStack,
    http: aiohttp.ClientSession,
    store: Store,
    account: str,
    methods: tuple[str, ...],
) -> None:
    key, record = await store.create_key(account, methods=methods)
    chain = stack.chains["bsc"]
    async with http.ws_connect(f"{stack.ws}/bsc/{key}") as ws:
        await rpc(ws, SUB_HEADS)  # 1 unit of the burst of 5
        got = 0
        for _ in range(30):
            chain.mine()
            await asyncio.sleep(0.06)  # a charge interval passes between blocks
        while True:
            try:
                await notes(ws, 1, wait_s=0.3)
            except TimeoutError:
                break
            got += 1
        # 30 blocks in ~1.8 s: bucket 5 + 2/s refill allows ~8; one interval
        # of arrears may slip through on top. Once refused, nothing more is
        # delivered until the debt is paid.
        assert 4 <= got <= 12, got
        dropped = _metric(stack, "gateway_ws_notifications_dropped_total", reason="budget")
        assert dropped == 30 - got
        assert _metric(stack, "gateway_ws_notifications_total", network="bsc") == got
    # The charged units show as usage by method (once this process's sums are written).
    await stack.app[T.USAGE].flush()
    charged = (await store.usage(record.id)).methods.get("eth_subscription", 0)
    assert got - 2 <= charged <= got


async def test_dropped_notifications_are_told_on_the_next_call(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    """Before, notifications over the budget vanished with only a metric to show it."""
    key, _ = await store.create_key(account)
    chain = stack.chains["bsc"]
    async with http.ws_connect(f"{stack.ws}/bsc/{key}") as ws:
        await rpc(ws, SUB_HEADS)
        for _ in range(30):  # far past the burst of 5: delivery stops, drops start
            chain.mine()
            await asyncio.sleep(0.06)
        name = "gateway_ws_notifications_dropped_total"
        await eventually(lambda: _metric(stack, name, reason="budget") > 0)
        dropped = -1.0
        while _metric(stack, name, reason="budget") != dropped:  # late blocks still fanning
            dropped = _metric(stack, name, reason="budget")
            await asyncio.sleep(0.5)
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 77, "method": "eth_chainId"})
        assert answer["id"] == 77 and answer["error"]["code"] == -32005, answer
        reason = "notifications were dropped: this key is over its compute-unit budget"
        assert answer["error"]["message"] == f"Rate limit exceeded: {reason}"
        assert answer["error"]["data"]["dropped_notifications"] == dropped
        # told once: the count starts again, the socket stays open
        batch = [{"jsonrpc": "2.0", "id": i, "method": "eth_chainId"} for i in (1, 2)]
        again = await rpc(ws, batch)
        assert all(
            "dropped_notifications" not in (a.get("error") or {}).get("data", {}) for a in again
        ), again
        assert not ws.closed


async def test_an_answer_larger_than_the_send_bound_is_delivered(
    stack: WsStack, http: aiohttp.ClientSession, store: Store
) -> None:
    account = (await store.create_account("big@example.com", "correct horse", "payg")).id
    key, _ = await store.create_key(account)
    chain = stack.chains["bsc"]
    chain.mine(100)
    flt = {"fromBlock": hex(chain.head - 99), "toBlock": hex(chain.head)}
    async with http.ws_connect(f"{stack.ws}/bsc/{key}", max_msg_size=0) as ws:
        answer = await rpc(
            ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [flt]}
        )
        assert len(answer["result"]) == 100 * chain.logs_per_block
        assert len(orjson.dumps(answer)) > 65536
        assert (await rpc(ws, {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId"}))["id"] == 2


async def test_per_key_socket_cap(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    a = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    b = await http.ws_connect(f"{stack.ws}/opbnb/{api_key}")
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    assert err.value.status == 429
    await a.close()
    await eventually(lambda: len(stack.app[WS].sessions) == 1)
    c = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await b.close()
    await c.close()


async def test_subscriptions_per_socket_cap(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        sid = (await rpc(ws, SUB_HEADS))["result"]
        await rpc(ws, {**SUB_HEADS, "id": 2})
        over = await rpc(ws, {**SUB_HEADS, "id": 3})
        assert over["id"] == 3 and over["error"]["code"] == -32005
        unsub = {"jsonrpc": "2.0", "id": 4, "method": "eth_unsubscribe", "params": [sid]}
        assert (await rpc(ws, unsub))["result"] is True
        assert "result" in await rpc(ws, {**SUB_HEADS, "id": 5})


async def test_a_frame_over_the_size_limit_closes_with_1009(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_str(
            '{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["' + "a" * 5000 + '"]}'
        )
        msg = await ws.receive(timeout=5)
        assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 1009
    await eventually(lambda: _metric(stack, "gateway_ws_disconnects_total", reason="too_big") == 1)


async def test_a_client_that_never_answers_pings_is_closed(
    make_config: MakeConfig,
    ws_nodes: dict[str, list[MockWsNode]],
    http: aiohttp.ClientSession,
    api_key: str,
) -> None:
    cfg = make_config(
        {"ws": {"heartbeat_s": 0.3}},
        upstreams={name: [n.url for n in group] for name, group in ws_nodes.items()},
    )
    async with served(cfg) as srv:
        await _unanswered_pings_close(f"ws{srv.url[4:]}/bsc/{api_key}", srv.app, http)


async def _unanswered_pings_close(
    url: str, app: web.Application, http: aiohttp.ClientSession
) -> None:
    ws = await http.ws_connect(url, autoping=False)
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        msg = await ws.receive(timeout=5)
        if msg.type is aiohttp.WSMsgType.PING:
            continue  # seen, never answered
        break
    assert msg.type in (
        aiohttp.WSMsgType.CLOSE,
        aiohttp.WSMsgType.CLOSED,
        aiohttp.WSMsgType.CLOSING,
    )
    assert loop.time() - started < 2.0
    registry = app[METRICS].registry
    await eventually(
        lambda: (
            registry.get_sample_value("gateway_ws_disconnects_total", {"reason": "heartbeat"}) == 1
        )
    )
    await ws.close()


async def test_a_client_that_stops_reading_is_dropped_and_others_are_not_slowed(
    stack: WsStack, http: aiohttp.ClientSession, store: Store
) -> None:
    account = (await store.create_account("payg@example.com", "correct horse", "payg")).id
    key, _ = await store.create_key(account)
    # A raw client with a tiny receive window that never reads after the handshake.
    host, port = stack.http[len("http://") :].split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    nonce = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(
        sock,
        (
            f"GET /bsc/{key} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode(),
    )
    head = await loop.sock_recv(sock, 4096)
    assert head.startswith(b"HTTP/1.1 101")
    frame = b'{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs"]}'
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(frame))
    await loop.sock_sendall(sock, bytes([0x81, 0x80 | len(frame)]) + mask + masked)
    svc = stack.app[WS]
    await eventually(lambda: any(s.subs for s in svc.sessions))
    slow = next(s for s in svc.sessions if s.subs)
    # A healthy client on a key with a budget for it.
    fast_key, _ = await store.create_key(account)
    async with http.ws_connect(f"{stack.ws}/bsc/{fast_key}") as fast:
        await rpc(fast, SUB_HEADS)
        received: list[int] = []

        async def read() -> None:
            async for msg in fast:
                received.append(int(orjson.loads(msg.data)["params"]["result"]["number"], 16))

        reader = asyncio.create_task(read())
        chain = stack.chains["bsc"]
        chain.logs_per_block = 40  # ~25 KB of logs per block for the slow one
        first = chain.head + 1
        peak = 0
        for _ in range(300):
            chain.mine(2)
            peak = max(peak, slow.queued)
            await asyncio.sleep(0.005)
            if slow.closing:
                break
        assert slow.closing == "slow"
        assert peak <= 65536 + 2048  # the bound, plus at most the frame that crossed it
        await eventually(lambda: len(received) == chain.head - first + 1)
        assert received == list(range(first, chain.head + 1))  # the fast one missed nothing
        reader.cancel()
    await eventually(lambda: _metric(stack, "gateway_ws_disconnects_total", reason="slow") == 1)
    sock.close()


async def test_a_socket_that_opens_slowly_is_still_charged(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    """The charger drops idle key states; one it dropped while a socket was opening
    (the upgrade awaits Redis between making the state and registering the
    socket) left that socket counting on a state nobody charged: free
    notifications. The upgrade's Redis round trip is stretched here to span
    several charge intervals."""
    svc = stack.app[WS]
    acquire = svc.leases.acquire

    async def slow_acquire(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)  # six charge intervals
        return await acquire(*args, **kwargs)

    svc.leases.acquire = slow_acquire  # type: ignore[method-assign]
    key, record = await store.create_key(account)
    chain = stack.chains["bsc"]
    async with http.ws_connect(f"{stack.ws}/bsc/{key}") as ws:
        await rpc(ws, SUB_HEADS)
        for _ in range(30):
            chain.mine()
            await asyncio.sleep(0.06)
        got = 0
        while True:
            try:
                await notes(ws, 1, wait_s=0.3)
            except TimeoutError:
                break
            got += 1
        assert 4 <= got <= 12, got
    await stack.app[T.USAGE].flush()
    assert (await store.usage(record.id)).methods.get("eth_subscription", 0) >= got - 2
