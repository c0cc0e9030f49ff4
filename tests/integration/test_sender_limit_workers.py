"""The per-sender limit across processes: ``gateway serve --workers 2``, one sender
flooding through two keys gets exactly the sender's burst through; another sender is
untouched. A limit kept in each process's memory would let up to twice the burst through."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.demo.mocknode import MockNode
from gateway.redis.embedded import free_port
from gateway.store.accounts import Store
from tests.helpers.config import scenario
from tests.helpers.procs import stop, wait_ready
from tests.helpers.txs import sender_account, signed

BURST = 6
SENT = 24


@pytest.fixture
def port(
    tmp_path: Path, redis_url: str, prefix: str, mock_nodes: dict[str, MockNode]
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        scenario(
            "sender_limit",
            prefix=prefix,
            burst=BURST,
            bsc=mock_nodes["bsc"].url,
            opbnb=mock_nodes["opbnb"].url,
        )
    )
    env = {**os.environ, "GATEWAY_REDIS_URL": redis_url, "GATEWAY_CONFIG": str(cfg)}
    number = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(number), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield number, proc
    finally:
        stop(proc)


@pytest.mark.slow
async def test_one_sender_through_two_keys_on_two_workers(
    port: tuple[int, subprocess.Popen[bytes]], store: Store, account: str
) -> None:
    number, proc = port
    # in a thread: the mock nodes on this loop answer the start-up checks meanwhile
    await asyncio.to_thread(wait_ready, number, proc, "/readyz", 60.0)
    keys = [(await store.create_key(account, name=n))[0] for n in ("a", "b")]
    flood = sender_account(900)
    url = f"http://127.0.0.1:{number}/bsc/"

    async def send(key: str, raw: str) -> tuple[int, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]}
        # a connection per call: the two workers take them in turn
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url + key, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
            ) as resp,
        ):
            return resp.status, orjson.loads(await resp.read())

    answers = await asyncio.gather(
        *(send(keys[i % 2], signed(flood, nonce=i)) for i in range(SENT))
    )
    limited = [a for status, a in answers if status == 429]
    assert len(limited) == SENT - BURST, [s for s, _ in answers]
    for answer in limited:
        assert "sender limit" in answer["error"]["data"]["reason"]
    status, answer = await send(keys[0], signed(sender_account(901)))
    assert status == 200 and "result" in answer, answer  # another sender is untouched
