"""Refused bodies behind the shipped HAProxy and nginx, run for real.

Client -> proxy (deploy/haproxy.cfg or deploy/nginx.conf) -> gateway (the real
app on a real port) -> mock node. Neither proxy can inflate a request body,
so each refuses what it can judge without doing so, in the gateway's words:
a coding the gateway does not take (415) and a declared length over its cap
(413), before the body is read. A gzip bomb passes the proxy (about 1 MB on
the wire) and the gateway refuses it in bounded slices: the client gets a
413 in moments and the gateway answers the next call at once.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest

from tests.helpers.config import MakeConfig
from tests.helpers.proxies import PROXIES, Proxy, until_passing
from tests.helpers.rawhttp import aexchange, gzip_bomb, request
from tests.helpers.served import served

pytestmark = pytest.mark.slow  # a proxy process each

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb()


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


@pytest.mark.parametrize("proxy", PROXIES)
async def test_the_proxies_refuse_what_the_gateway_would_and_pass_bounded_gzip(
    proxy: Proxy, make_config: MakeConfig, api_key: str, tmp_path: Path, bomb: bytes
) -> None:
    async with served(make_config()) as srv:
        with proxy(srv.port, tmp_path) as front:
            async with aiohttp.ClientSession() as session:
                await until_passing(session, f"{front}/bsc/{api_key}")
            port, path = _port(front), f"/bsc/{api_key}"

            # a coding the gateway does not inflate: the proxy's 415, in its words
            got, _ = await aexchange(
                port, request(path, b"\x00" * 64, headers={"Content-Encoding": "br"})
            )
            assert [r.status for r in got] == [415], got
            assert got[0].headers.get("accept-encoding") == "gzip, deflate"
            error = orjson.loads(got[0].body)["error"]
            assert error["code"] == -32600 and error["message"].startswith("Invalid Request: ")

            # a declared 50 MB body: refused before it is sent, no 100 Continue
            head = request(
                path, b"", headers={"Content-Length": str(50 * 2**20), "Expect": "100-continue"}
            )
            got, _ = await aexchange(port, head, timeout_s=10)
            assert [r.status for r in got] == [413], got
            assert orjson.loads(got[0].body)["error"]["code"] == -32600

            # gzip passes; the gateway stops inflating at its limit and refuses
            # (the proxy may go on reading the client's rest: its own business)
            started = time.monotonic()
            got, _ = await aexchange(
                port, request(path, bomb, headers={"Content-Encoding": "gzip"}), timeout_s=20
            )
            assert [r.status for r in got] == [413], got
            assert time.monotonic() - started < 10.0
            # a small gzip body is inflated and answered, and the next call too
            small = zlib.compress(CALL, wbits=31)
            got, _ = await aexchange(
                port, request(path, small, headers={"Content-Encoding": "gzip"}), timeout_s=5
            )
            assert [r.status for r in got] == [200], got
            assert orjson.loads(got[0].body)["result"] == "0x38"
