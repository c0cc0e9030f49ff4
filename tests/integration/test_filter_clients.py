"""Real clients with default options listen for contract events through real gateway
processes: ethers v6 ``contract.on``, viem
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
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config.methods import default_methods
from gateway.filters.service import FILTER_METHODS
from gateway.redis import keyspace as ks
from gateway.redis.embedded import LOOPBACK, free_port
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
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


async def eventually(
    check: Callable[[], bool], what: str, timeout_s: float = 45.0, state: Any = None
) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {state() if state else ''}")


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
        self._w3: AsyncWeb3[AsyncHTTPProvider] | None = None

    async def start(self) -> None:
        await self.start_js(want=3)
        self._w3 = w3 = AsyncWeb3(AsyncHTTPProvider(self.url))
        blocks = await w3.eth.filter("latest")
        contract = w3.eth.contract(address=w3.to_checksum_address(self.contract), abi=PING_ABI)
        events = await contract.events.Ping.create_filter(from_block="latest")
        self.filter_id = str(events.filter_id)
        self._tasks.append(asyncio.create_task(self._poll_web3(blocks, events)))

    async def start_js(self, want: int) -> None:
        """ethers and viem, listening in one Node.js process until ``want`` events each."""
        self._js = await asyncio.create_subprocess_exec(
            "node",
            str(JS / "filters_listen.mjs"),
            *(self.url, self.contract, str(want)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self._js.stdout is not None
        line = await asyncio.wait_for(self._js.stdout.readline(), 60)
        assert orjson.loads(line)["ready"], line
        self._tasks.append(asyncio.create_task(self._read_js()))

    async def _read_js(self) -> None:
        assert self._js is not None and self._js.stdout is not None
        while line := await self._js.stdout.readline():
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:  # a library's own console output (ethers: "@TODO")
                self.errors.append(line.decode(errors="replace").strip())
                continue
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

    def both(self, n: int) -> Callable[[], bool]:
        """Whether ethers and viem each have ``n`` events (the web3.py part not started)."""
        return lambda: len(self.got["ethers"]) >= n and len(self.got["viem"]) >= n

    def have(self, n: int) -> bool:
        return all(len(got) >= n for got in self.got.values())

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._w3 is not None:
            await self._w3.provider.disconnect()  # its cached aiohttp session
        if self._js is not None and self._js.returncode is None:
            self._js.kill()
            await self._js.wait()


async def test_real_clients_get_every_event_once_through_failover_and_restart(
    tmp_path: Path, redis_url: str, prefix: str, store: Store, account: str
) -> None:
    # one listening key per network, so each key's live filters are one network's
    keys = {net: (await store.create_key(account, name=net))[0] for net in CHAINS}
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

        listeners = {
            net: Listeners(f"{front.url}/{net}/{keys[net]}", emitters[net][1]) for net in CHAINS
        }
        for listener in listeners.values():
            await listener.start()
            stack.push_async_callback(listener.close)
        redis = store.redis
        for key in keys.values():  # ethers and viem make theirs on their first 4 s poll
            index = ks.filter_index(prefix, key_hash(key))
            for _ in range(300):
                if await redis.zcard(index) >= 4:  # ethers, viem, web3's block and event filters
                    break
                await asyncio.sleep(0.1)
            assert await redis.zcard(index) >= 4
            # ... and each has been polled once: ethers then takes its starting block
            # number (eth_blockNumber), and it polls its filter only on a block after
            # that one. An event mined before would wait for the next block, which
            # Hardhat (one block per transaction) never makes here.
            for _ in range(300):
                khash = key_hash(key)
                fids = [
                    f if isinstance(f, str) else f.decode()
                    for f in await redis.zrange(index, 0, -1)
                ]
                vers = [await redis.hget(ks.filter_state(prefix, khash, f), "ver") for f in fids]
                if all(v is not None and int(v) >= 1 for v in vers):
                    break
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # ethers' eth_blockNumber follows its first poll

        async def emit(n: int) -> dict[str, str]:
            blocks = {}
            for net, url in nodes.items():
                sender, contract = emitters[net]
                blocks[net] = (await ping(url, sender, contract, n))["blockHash"]
            return blocks

        def everyone(n: int) -> Callable[[], bool]:
            return lambda: all(lst.have(n) for lst in listeners.values())

        def state() -> dict[str, Any]:
            return {net: (lst.got, lst.errors) for net, lst in listeners.items()}

        hashes = [await emit(1)]
        await eventually(everyone(1), "event 1", state=state)
        # the node that served the most goes away
        for net in CHAINS:
            busiest = max(relays[net], key=lambda r: r.relayed)
            await busiest.stop()
        hashes.append(await emit(2))
        await eventually(everyone(2), "event 2 after a node failover", state=state)
        # the gateway process the clients use restarts; they hop to the other meanwhile
        await first.stop()
        hashes.append(await emit(3))
        await eventually(everyone(3), "event 3 during a gateway restart", state=state)
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


async def test_ethers_falls_back_to_get_logs_when_filters_are_not_offered(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], api_key: str
) -> None:
    """A network whose operator took the filter methods out: the -32601 in geth's words
    makes ethers v6 (and viem) fall back to eth_getLogs polling, so events still arrive."""
    async with contextlib.AsyncExitStack() as stack:
        node = await stack.enter_async_context(hardhat_node(56))
        sender, contract = await deploy_emitter(node)
        methods = [m for m in default_methods(56) if m not in FILTER_METHODS]
        cfg = make_config(
            {
                "plans": {"free": {"rate": 100_000, "burst": 200_000}},
                "networks": {"bsc": {"methods": methods}},
            },
            upstreams={"bsc": [node]},
        )
        client = await aiohttp_client(TestServer(create_app(cfg)))
        listener = Listeners(f"http://{LOOPBACK}:{client.port}/bsc/{api_key}", contract)
        stack.push_async_callback(listener.close)
        await listener.start_js(want=2)
        await asyncio.sleep(5)  # ethers tries eth_newFilter on its first poll, then falls back
        for n in (1, 2):
            # One block per ethers polling round: two new blocks in one round make ethers
            # run two eth_getLogs polls at once from the same block, and it delivers
            # their logs twice (its own race, seen straight against a node too).
            await ping(node, sender, contract, n)
            await eventually(
                listener.both(n), f"event {n} by eth_getLogs polling", state=lambda: listener.got
            )
        await asyncio.sleep(5)
        assert listener.got["ethers"] == [1, 2] and listener.got["viem"] == [1, 2]
