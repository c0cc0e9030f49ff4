"""A real EVM behind the gateway for client tests: Hardhat, TCP forwarders, an event emitter.

``hardhat_node`` starts the pinned Hardhat (tests/js) on a free port;
``Forwarder`` is a TCP relay that can be stopped (its listener and every
connection through it cut at once, as a node or a gateway going away looks
to a client) and started again on the same port. ``deploy_emitter`` puts a
tiny contract on the node from raw bytecode: each call emits
``Ping(uint256 n)`` with ``n`` = the call's first 32 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from gateway.redis.embedded import LOOPBACK, free_port

JS = Path(__file__).resolve().parents[1] / "js"
HARDHAT = JS / "node_modules" / ".bin" / "hardhat"
# keccak256("Ping(uint256)"), the event's topic 0
PING_TOPIC = "48257dc961b6f792c2b78a080dacfed693b660960a702de21cee364e20270e2f"


def hardhat_ready() -> bool:
    return shutil.which("node") is not None and HARDHAT.exists()


async def rpc(url: str, method: str, params: list[Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        answer = await resp.json(content_type=None)
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


@contextlib.asynccontextmanager
async def hardhat_node(chain_id: int) -> AsyncIterator[str]:
    """A Hardhat node for ``chain_id``; yields its URL."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(HARDHAT),
        *("node", "--hostname", LOOPBACK, "--port", str(port)),
        cwd=JS,
        env={**os.environ, "HARDHAT_CHAIN_ID": str(chain_id)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://{LOOPBACK}:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(OSError, aiohttp.ClientError, RuntimeError):
                if int(await rpc(url, "eth_chainId", []), 16) == chain_id:
                    break
            if proc.returncode is not None:
                raise RuntimeError("hardhat exited")
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError("hardhat did not start")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await proc.wait()


def emitter_code(topic: str = PING_TOPIC) -> str:
    """Init code whose runtime emits LOG1(topic, calldata[0:32]) on every call."""
    runtime = (
        "600035"  # PUSH1 0 CALLDATALOAD
        "600052"  # PUSH1 0 MSTORE
        f"7f{topic}"  # PUSH32 topic
        "6020"  # PUSH1 32 (size)
        "6000"  # PUSH1 0 (offset)
        "a1"  # LOG1
        "00"  # STOP
    )
    size = len(runtime) // 2
    init = f"60{size:02x}600c60003960{size:02x}6000f3"  # CODECOPY, RETURN
    return "0x" + init + runtime


async def deploy_emitter(url: str) -> tuple[str, str]:
    """(sender, contract address) of a fresh emitter on the node at ``url``."""
    sender = (await rpc(url, "eth_accounts", []))[0]
    tx = await rpc(url, "eth_sendTransaction", [{"from": sender, "data": emitter_code()}])
    receipt = await rpc(url, "eth_getTransactionReceipt", [tx])
    return sender, receipt["contractAddress"]


async def ping(url: str, sender: str, contract: str, n: int) -> dict[str, Any]:
    """Emit ``Ping(n)`` (one transaction, mined at once); its receipt."""
    data = "0x" + f"{n:064x}"
    tx = await rpc(url, "eth_sendTransaction", [{"from": sender, "to": contract, "data": data}])
    receipt: dict[str, Any] = await rpc(url, "eth_getTransactionReceipt", [tx])
    return receipt


class Forwarder:
    """A TCP relay on a fixed port to the first backend that accepts; stoppable."""

    def __init__(self, backends: Sequence[tuple[str, int]], port: int = 0) -> None:
        self.backends = list(backends)
        self.port = port or free_port()
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.StreamWriter] = set()
        self.relayed = 0  # bytes passed on, both ways: who served the most

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, LOOPBACK, self.port)

    async def stop(self) -> None:
        """Stop listening and cut every connection through it."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._live):
            writer.transport.abort()
        self._live.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._live.add(writer)
        for host, port in self.backends:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                continue
        else:
            writer.transport.abort()
            self._live.discard(writer)
            return
        self._live.add(up_writer)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._live.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                self.relayed += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.write_eof()
