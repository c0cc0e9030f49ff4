"""HTTP and WebSocket through the shipped nginx and HAProxy configs, for real.

Client -> proxy (``deploy/nginx.conf`` or ``deploy/haproxy.cfg`` as a
subprocess) -> gateway (the real app on a real port) -> mock nodes that
speak WebSocket. The proxies' idle timeouts and the gateway's heartbeat are
both multiplied by ``SCALE``: the ratio between them is the shipped one, so
a quiet socket that outlives several of the proxy's idle timeouts here
outlives them in production, where they are minutes and hours.

Before the fix nginx answered the upgrade with 405 (no ``Upgrade`` header
passed on) and HAProxy cut a quiet socket at ``timeout server`` (30 s, the
same as the heartbeat then).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.config import WsConfig
from tests.helpers.proxies import PROXIES, ROOT, Proxy, until_passing
from tests.helpers.wsstack import WsStack

SCALE = 0.1  # 20 s heartbeat -> 2 s; nginx's 75 s read timeout -> 7.5 s
HEARTBEAT_S = WsConfig().heartbeat_s * SCALE

# Nothing ever logs from this address on the mock chains: a quiet subscription.
QUIET = {"address": "0x" + "ee" * 20}


@pytest.fixture
def ws_raw() -> dict[str, object]:  # this module's override of wsstack's fixture
    return {"ws": {"heartbeat_s": HEARTBEAT_S}}


def _seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", value)
    assert m, value
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def test_the_shipped_idle_timeouts_leave_room_for_several_heartbeats() -> None:
    """The ratio the live test relies on, read from the files as shipped."""
    beat = WsConfig().heartbeat_s
    nginx_conf = (ROOT / "deploy" / "nginx.conf").read_text()
    read = re.search(r"proxy_read_timeout (\w+);", nginx_conf)
    assert read and _seconds(read.group(1)) >= 3 * beat
    assert "proxy_set_header Upgrade $http_upgrade;" in nginx_conf
    haproxy_cfg = (ROOT / "deploy" / "haproxy.cfg").read_text()
    tunnel = re.search(r"timeout tunnel (\w+)", haproxy_cfg)
    assert tunnel and _seconds(tunnel.group(1)) >= 3600  # hours of a quiet subscription


class Reader:
    """Reads a socket all the time, as a real client does (aiohttp answers pings
    only inside ``receive``): frames go to a queue, calls wait on it."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self.closed: asyncio.Event = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                self.frames.put_nowait(orjson.loads(msg.data))
        self.closed.set()

    async def call(self, method: str, *params: object) -> dict[str, object]:
        await self.ws.send_bytes(
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
        )
        while True:
            obj = await asyncio.wait_for(self.frames.get(), 10)
            if obj.get("method") != "eth_subscription":
                return obj

    async def note(self) -> dict[str, object]:
        while True:
            obj = await asyncio.wait_for(self.frames.get(), 10)
            if obj.get("method") == "eth_subscription":
                return obj


@pytest.mark.slow
@pytest.mark.parametrize("proxy", PROXIES)
async def test_http_and_quiet_websockets_live_through_the_proxy(
    proxy: Proxy, stack: WsStack, http: aiohttp.ClientSession, api_key: str, tmp_path: Path
) -> None:
    port = int(stack.http.rsplit(":", 1)[1])
    with proxy(port, tmp_path, SCALE) as front:
        await until_passing(http, f"{front}/bsc/{api_key}")
        ws_front = "ws" + front[len("http") :]
        async with (
            http.ws_connect(f"{ws_front}/bsc/{api_key}") as idle_ws,
            http.ws_connect(f"{ws_front}/bsc/{api_key}") as quiet_ws,
        ):
            idle, quiet = Reader(idle_ws), Reader(quiet_ws)
            sub = await quiet.call("eth_subscribe", "logs", QUIET)
            assert isinstance(sub.get("result"), str), sub
            # Several heartbeats, and more than the (scaled) proxies' idle limits:
            # nginx's read timeout is 3.75 heartbeats, HAProxy's server one 1.5.
            await asyncio.sleep(5 * HEARTBEAT_S)
            for reader in (idle, quiet):
                assert not reader.closed.is_set(), reader.ws.close_code
                answer = await reader.call("eth_chainId")
                assert answer["result"] == "0x38", answer
            # the idle socket subscribes now, and a block reaches it through the proxy
            heads = await idle.call("eth_subscribe", "newHeads")
            assert isinstance(heads.get("result"), str), heads
            stack.chains["bsc"].mine()
            note = await idle.note()
            assert note["params"]["subscription"] == heads["result"], note  # type: ignore[index]
            gone = await quiet.call("eth_unsubscribe", sub["result"])
            assert gone["result"] is True, gone
