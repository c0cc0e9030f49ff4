"""The per-key socket cap holds across gateway processes, and a crashed process's
sockets stop counting once their leases lapse."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import pytest

from gateway.demo.mockws import MockWsNode
from tests.helpers.procs import gateway_processes


@pytest.fixture
async def processes(
    tmp_path: Path, redis_url: str, prefix: str, ws_nodes: dict[str, list[MockWsNode]]
) -> AsyncIterator[list[int]]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        f'[redis]\nprefix = "{prefix}"\n'
        f'[networks.bsc]\nupstreams = ["{ws_nodes["bsc"][0].url}"]\n'
        f'[networks.opbnb]\nupstreams = ["{ws_nodes["opbnb"][0].url}"]\n'
        "[server]\naccess_log = false\n[dashboard]\nenabled = false\n"
        "[ws]\nsocket_lease_s = 3.0\n"
        "[plans.free]\nws_max_sockets = 2\n"
    )
    # Waiting for readiness in a thread: the mock nodes live on this test's event
    # loop and must answer the gateways' start-up checks meanwhile.
    with ExitStack() as started:
        procs = gateway_processes(2, cfg, {"GATEWAY_REDIS_URL": redis_url})
        yield await asyncio.to_thread(started.enter_context, procs)


async def _refused(http: aiohttp.ClientSession, url: str) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(url)
    return err.value.status


async def test_the_socket_cap_counts_every_process(
    processes: list[int], http: aiohttp.ClientSession, api_key: str
) -> None:
    a, b = (f"ws://127.0.0.1:{port}/bsc/{api_key}" for port in processes)
    first = await http.ws_connect(a)
    second = await http.ws_connect(b)
    assert await _refused(http, a) == 429
    assert await _refused(http, b) == 429
    await first.close()
    await asyncio.sleep(0.3)  # the lease is released right after the close
    third = await http.ws_connect(a)
    await second.close()
    await third.close()


async def test_a_crashed_process_frees_its_sockets_when_the_leases_lapse(
    processes: list[int], http: aiohttp.ClientSession, api_key: str
) -> None:
    a, b = (f"ws://127.0.0.1:{port}/bsc/{api_key}" for port in processes)
    held = [await http.ws_connect(b), await http.ws_connect(b)]
    assert await _refused(http, a) == 429
    from tests.integration.test_ws_revocation import _pid_listening_on

    os.kill(_pid_listening_on(processes[1]), signal.SIGKILL)  # no close, no release
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            ws = await http.ws_connect(a)
            break
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status == 429
            assert loop.time() - start < 6, "leases never lapsed"
            await asyncio.sleep(0.25)
    assert loop.time() - start > 1.0  # held until the lease ran out, not freed by magic
    await ws.close()
    for sock in held:
        await sock.close()
