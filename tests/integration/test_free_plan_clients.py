"""A dapp's first seconds on the shipped free plan, through ethers v6 and viem as shipped.

A burst a little over the plan's burst (60 reads at once: ethers' JsonRpcProvider
and viem's ``batch: true`` send them as one batch), then reads one after another
as fast as they come back for 3 s. Every call is answered and none fails, nor
is any refused on the way (viem retries a refused call, ethers does not): the
gateway slows the client to the plan's rate (the calls over the bucket wait for
it, ``limits.max_wait_s``) instead of refusing them, which neither library would
retry inside a batch answer. The elapsed time is at least what the bucket
implies, and no call waited past ``max_wait_s``. Against the demo's mock node
and, where it is installed, Hardhat.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import Client, MakeConfig
from tests.helpers.evmstack import JS, hardhat_node, hardhat_ready

RATE, BURST = 25, 50  # the shipped free plan
MAX_WAIT_S = 1.0  # the shipped limits.max_wait_s
SLACK_S = 0.75  # node start-up of the script and a loaded test box
READS, SECONDS = 60, 3.0

pytestmark = pytest.mark.skipif(not hardhat_ready(), reason="npm install --prefix tests/js")


async def pace(library: str, url: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "free_plan_pace.mjs"),
        library,
        url,
        str(READS),
        str(SECONDS),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


def check(client: Client, result: dict[str, Any]) -> None:
    assert result["ok"] and result["failed"] == 0, result
    # none was refused on the way either (viem would retry a -32005 and hide it)
    refused = client.app[METRICS].registry.get_sample_value(
        "gateway_rate_limited_total", {"network": "bsc"}
    )
    assert not refused, (refused, result)
    # the bucket holds BURST, then refills at RATE: the reads cannot all pass sooner
    assert result["elapsed_s"] >= (result["calls"] - BURST) / RATE * 0.9, result
    assert result["burst_s"] >= (READS - BURST) / RATE * 0.9, result
    assert result["max_call_s"] < MAX_WAIT_S + SLACK_S, result


@pytest.fixture
async def hardhat() -> AsyncIterator[str]:
    async with hardhat_node(56) as url:
        yield url


@pytest.mark.parametrize("library", ["ethers", "viem"])
async def test_the_free_plan_slows_a_client_in_front_of_the_demo_node(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, library: str
) -> None:
    client: Client = await aiohttp_client(TestServer(create_app(make_config())))
    check(client, await pace(library, str(client.make_url(f"/bsc/{api_key}"))))


@pytest.mark.parametrize("library", ["ethers", "viem"])
async def test_the_free_plan_slows_a_client_in_front_of_hardhat(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, library: str, hardhat: str
) -> None:
    cfg = make_config({"upstream": {"max_lag_blocks": 10_000}}, upstreams={"bsc": [hardhat]})
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    check(client, await pace(library, str(client.make_url(f"/bsc/{api_key}"))))
