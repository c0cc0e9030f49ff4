"""Real clients with default options listen for contract events through real gateway
processes (SPEC §10 "Filters"; issue 23): ethers v6 ``contract.on``, viem
``watchContractEvent``, web3.py ``w3.eth.filter("latest")`` and
``contract.events.X.create_filter(from_block="latest")``, on both networks at once.

The stack: one Hardhat per network (a real EVM), reached by the gateway as two
nodes (two TCP forwarders onto it, so stopping one is a node going away on the
same chain), two ``gateway serve`` processes sharing the test Redis, and a
front forwarder that sends each client connection to the first gateway that
accepts. While the clients listen, the node that served the most is stopped
and the first gateway is restarted (the clients hop to the second meanwhile);
every event still arrives exactly once, and another key polling a filter id
gets ``filter not found``. Transactions go straight to Hardhat: the gateway
never offers eth_sendTransaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.redis import keyspace as ks
from gateway.redis.embedded import LOOPBACK, free_port
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.evmstack import (
    JS,
    Forwarder,
    deploy_emitter,
    hardhat_node,
    hardhat_ready,
    ping,
)

_RECURSION_LIMIT = sys.getrecursionlimit()  # web3 raises it on import (see test_ws_clients)
from web3 import AsyncHTTPProvider, AsyncWeb3  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hardhat_ready(), reason="npm install --prefix tests/js has not run"),
]
CHAINS = {"bsc": 56, "opbnb": 204}
PING_ABI = [
    {
        "type": "event",
        "name": "Ping",
        "anonymous": False,
        "inputs": [{"name": "n", "type": "uint256", "indexed": False}],
    }
]


class Gateway:
    """One ``gateway serve`` process on a fixed port (so it can be restarted there)."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gateway", "serve", "--host", LOOPBACK),
            *("--port", str(self.port), "--metrics-listen", ""),
            env={**os.environ, "GATEWAY_CONFIG": str(self.config)},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if self.proc.returncode is not None:
                    raise RuntimeError("gateway exited")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(f"http://{LOOPBACK}:{self.port}/readyz") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise RuntimeError("gateway not ready")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()  # SIGTERM: in-flight calls drain
            await asyncio.wait_for(self.proc.wait(), 20)
        self.proc = None


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Listeners:
    """Every client of one network, and what each has received."""

    def __init__(self, url: str, contract: str) -> None:
        self.url = url
        self.contract = contract
        self.got: dict[str, list[int]] = {"ethers": [], "viem": [], "web3": []}
        self.blocks: list[str] = []
        self.errors: list[str] = []
        self.filter_id = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._js: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._js = await asyncio.create_subprocess_exec(
            "node",
            str(JS / "filters_listen.mjs"),
            *(self.url, self.contract, "3"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self._js.stdout is not None
        line = await asyncio.wait_for(self._js.stdout.readline(), 60)
        assert orjson.loads(line)["ready"], line
        self._tasks.append(asyncio.create_task(self._read_js()))
        w3 = AsyncWeb3(AsyncHTTPProvider(self.url))
        blocks = await w3.eth.filter("latest")
        contract = w3.eth.contract(address=w3.to_checksum_address(self.contract), abi=PING_ABI)
        events = await contract.events.Ping.create_filter(from_block="latest")
        self.filter_id = str(events.filter_id)
        self._tasks.append(asyncio.create_task(self._poll_web3(blocks, events)))

    async def _read_js(self) -> None:
        assert self._js is not None and self._js.stdout is not None
        while line := await self._js.stdout.readline():
            item = orjson.loads(line)
            if "n" in item:
                self.got[item["lib"]].append(item["n"])
            elif "error" in item:
                self.errors.append(f"{item['lib']}: {item['error']}")

    async def _poll_web3(self, blocks: Any, events: Any) -> None:
        while True:
            try:
                self.blocks += [h.to_0x_hex() for h in await blocks.get_new_entries()]
                self.got["web3"] += [e["args"]["n"] for e in await events.get_new_entries()]
            except Exception as exc:  # a connection cut during a restart: poll again
                self.errors.append(f"web3: {exc!r}")
            await asyncio.sleep(0.5)

    def have(self, n: int) -> bool:
        return all(len(got) >= n for got in self.got.values())

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._js is not None and self._js.returncode is None:
            self._js.kill()
            await self._js.wait()


async def test_real_clients_get_every_event_once_through_failover_and_restart(
    tmp_path: Path, redis_url: str, prefix: str, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, name="listener")
    other, _ = await store.create_key(account, name="other")
    async with contextlib.AsyncExitStack() as stack:
        nodes: dict[str, str] = {}
        relays: dict[str, list[Forwarder]] = {}
        for net, chain_id in CHAINS.items():
            nodes[net] = await stack.enter_async_context(hardhat_node(chain_id))
            port = int(nodes[net].rsplit(":", 1)[1])
            relays[net] = [Forwarder([(LOOPBACK, port)]) for _ in range(2)]
            for relay in relays[net]:
                await relay.start()
                stack.push_async_callback(relay.stop)
        emitters = {net: await deploy_emitter(url) for net, url in nodes.items()}
        config = tmp_path / "gateway.toml"
        config.write_text(
            f'[redis]\nurl = "{redis_url}"\nprefix = "{prefix}"\n'
            "[upstream]\nprobe_interval_s = 0.2\n"
            "[server]\ndrain_timeout_s = 2.0\n"
            "[plans.free]\nrate = 100000\nburst = 200000\n"
            + "".join(
                f'[networks.{net}]\nupstreams = ["{relays[net][0].url}", "{relays[net][1].url}"]\n'
                for net in CHAINS
            )
        )
        first, second = Gateway(config), Gateway(config)
        await first.start()
        stack.push_async_callback(first.stop)
        await second.start()
        stack.push_async_callback(second.stop)
        front = Forwarder([(LOOPBACK, first.port), (LOOPBACK, second.port)])
        await front.start()
        stack.push_async_callback(front.stop)

        listeners = {net: Listeners(f"{front.url}/{net}/{key}", emitters[net][1]) for net in CHAINS}
        for listener in listeners.values():
            await listener.start()
            stack.push_async_callback(listener.close)
        redis = store.redis
        index = ks.filter_index(prefix, key_hash(key))
        for _ in range(200):  # ethers and viem make theirs on their first 4 s poll
            if await redis.zcard(index) >= 8:  # 4 filters per network
                break
            await asyncio.sleep(0.1)
        assert await redis.zcard(index) >= 8

        async def emit(n: int) -> dict[str, str]:
            blocks = {}
            for net, url in nodes.items():
                sender, contract = emitters[net]
                blocks[net] = (await ping(url, sender, contract, n))["blockHash"]
            return blocks

        def everyone(n: int) -> Callable[[], bool]:
            return lambda: all(lst.have(n) for lst in listeners.values())

        hashes = [await emit(1)]
        await eventually(everyone(1), "event 1")
        # the node that served the most goes away
        for net in CHAINS:
            busiest = max(relays[net], key=lambda r: r.relayed)
            await busiest.stop()
        hashes.append(await emit(2))
        await eventually(everyone(2), "event 2 after a node failover")
        # the gateway process the clients use restarts; they hop to the other meanwhile
        await first.stop()
        hashes.append(await emit(3))
        await eventually(everyone(3), "event 3 during a gateway restart")
        await first.start()
        await asyncio.sleep(9)  # two more polling rounds of every client: nothing new arrives

        for net, listener in listeners.items():
            print(net, "errors seen by the clients (retried):", listener.errors)
            for lib, got in listener.got.items():
                assert got == [1, 2, 3], (net, lib, got, listener.errors)
            assert listener.blocks == [h[net] for h in hashes], (net, listener.errors)
            async with aiohttp.ClientSession() as session:
                body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getFilterChanges"}
                body["params"] = [listener.filter_id]
                async with session.post(f"{front.url}/{net}/{other}", json=body) as resp:
                    answer = await resp.json()
            assert answer["error"] == {"code": -32000, "message": "filter not found"}
