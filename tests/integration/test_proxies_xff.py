"""The client IP behind a real HAProxy and a real nginx.

Client -> proxy (shipped config, as a subprocess) -> gateway (the real app on
a real port) -> mock node. The gateway trusts only the proxy's source address
(``SOURCE``); the client connects from 127.0.0.1 and forges
``X-Forwarded-For: 203.0.113.7``. HAProxy adds its own header line after the
client's (the first line is the forgery), nginx appends to the client's value.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401  (both doors)
from tests.helpers.proxies import PROXIES, SOURCE, Proxy, until_passing
from tests.helpers.served import served

FORGED = "203.0.113.7"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'


async def status(session: aiohttp.ClientSession, url: str, *forwarded: str) -> int:
    """POST one call, optionally with one X-Forwarded-For line per ``forwarded``."""
    headers = CIMultiDict([("Content-Type", "application/json")])
    for value in forwarded:
        headers.add("X-Forwarded-For", value)
    async with session.post(url, data=CALL, headers=headers) as resp:
        await resp.read()
        return resp.status


@pytest.mark.parametrize("proxy", PROXIES)
async def test_forged_forwarded_for_does_not_pass_an_ip_allowlist(
    proxy: Proxy, make_config: MakeConfig, store: Store, account: str, tmp_path: Path
) -> None:
    forged_key, _ = await store.create_key(account, ips=[f"{FORGED}/32"])
    genuine_key, _ = await store.create_key(account, ips=["127.0.0.1/32"])
    proxy_key, _ = await store.create_key(account, ips=[f"{SOURCE}/32"])
    cfg = make_config({"server": {"trusted_proxies": [f"{SOURCE}/32"]}})
    async with served(cfg) as srv:
        port = srv.port
        with proxy(port, tmp_path) as front:
            async with aiohttp.ClientSession() as session:
                await until_passing(session, f"{front}/bsc/{genuine_key}")
                # the genuine client: no header, its own header, two header lines
                for forwarded in ((), (FORGED,), (FORGED, f"198.51.100.1, {FORGED}")):
                    got = await status(session, f"{front}/bsc/{genuine_key}", *forwarded)
                    assert got == 200, forwarded
                    got = await status(session, f"{front}/bsc/{forged_key}", *forwarded)
                    assert got == 403, forwarded
                # the proxy's own address is skipped, not taken for the client
                assert await status(session, f"{front}/bsc/{proxy_key}") == 403
