"""The soak's traffic: mixed HTTP over many keys with every refusal class, WebSocket
churn, slow clients (a head one byte at a time, an answer never read) and aborting
ones (a reset mid-request). ``bench.scenarios.soak`` runs it and samples the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import secrets
import socket
import struct
import time
from collections import Counter
from typing import Any

import aiohttp

ADDRESSES = 5_000  # distinct eth_getBalance params: cache keys by the thousand

MAX_BODY = 65_536  # small, so the 413 class costs little to send


def _call(rng: random.Random, method: str | None = None) -> dict[str, Any]:
    method = method or rng.choice(
        ["eth_getBalance"] * 4 + ["eth_blockNumber", "eth_chainId", "eth_getBlockByNumber"]
    )
    params: list[Any] = []
    if method == "eth_getBalance":
        params = [f"0x{rng.randrange(ADDRESSES):040x}", hex(rng.randrange(1, 900_000))]
    elif method == "eth_getBlockByNumber":
        params = [hex(rng.randrange(1, 900_000)), False]
    return {"jsonrpc": "2.0", "id": rng.randrange(1 << 40), "method": method, "params": params}


class Traffic:
    """The load's state: outcome counts and what must never happen."""

    def __init__(self, url: str, keys: list[str], tiny: str, seed: int) -> None:
        self.url = url
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.keys = keys
        self.tiny = tiny
        self.revoked: list[str] = []
        self.rng = random.Random(seed)
        self.kinds: Counter[str] = Counter()
        self.bad: Counter[str] = Counter()  # 500s, non-JSON-RPC bodies, wrong ids
        self.stop = asyncio.Event()
        self._hostile: set[asyncio.Task[None]] = set()

    def note(self, kind: str, status: int) -> None:
        self.kinds[f"{kind} {status}"] += 1
        if status >= 500 and status not in (502, 503, 504):
            self.bad[f"{kind}: HTTP {status}"] += 1

    async def http(self, session: aiohttp.ClientSession) -> None:
        """One request of the mix: 80 % reads, 20 % refusals of every class."""
        rng = self.rng
        key = rng.choice(self.keys)
        roll = rng.random()
        call = _call(rng)
        body = json.dumps(call).encode()
        headers = {"Content-Type": "application/json"}
        path, method, kind = f"/bsc/{key}", "POST", "read"
        if roll < 0.05:
            call = [_call(rng) for _ in range(rng.randrange(2, 6))]  # type: ignore[assignment]
            body, kind = json.dumps(call).encode(), "batch"
        elif roll < 0.80:
            pass
        elif roll < 0.82:
            path, kind = f"/bsc/{secrets.token_urlsafe(24)}", "unknown key"
        elif roll < 0.83 and self.revoked:
            path, kind = f"/bsc/{rng.choice(self.revoked)}", "revoked key"
        elif roll < 0.85:
            path, kind = f"/bsc/{self.tiny}", "tiny plan"
        elif roll < 0.86:
            method, kind = "GET", "GET"
        elif roll < 0.87:
            body, kind = b"[" * 10 + b"0" * MAX_BODY, "too large"
        elif roll < 0.88:
            headers["Content-Type"], kind = "text/plain", "text/plain"
        elif roll < 0.89:
            headers["Content-Encoding"], kind = "gzip", "gzip lie"
        elif roll < 0.90:
            body, kind = gzip.compress(body), "gzip"
            headers["Content-Encoding"] = "gzip"
        elif roll < 0.92:
            body, kind = b'{"jsonrpc":"2.0","id":1,', "parse error"
        elif roll < 0.94:
            body, kind = b'{"jsonrpc":"1.0","id":1,"method":"eth_chainId"}', "invalid"
        elif roll < 0.96:
            body, kind = b'{"jsonrpc":"2.0","id":1,"method":"admin_peers"}', "unknown method"
        elif roll < 0.97:
            headers["Expect"], kind = "200-ok", "expect"
        else:
            return await self.malformed()
        try:
            async with session.request(
                method, self.url + path, data=body, headers=headers, compress=None
            ) as resp:
                raw = await resp.read()
                self.note(kind, resp.status)
                self._check_body(kind, resp.status, raw, call)
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            self.kinds[f"{kind} {type(exc).__name__}"] += 1

    def _check_body(self, kind: str, status: int, raw: bytes, call: Any) -> None:
        try:
            answer = json.loads(raw)
        except ValueError:
            self.bad[f"{kind}: not JSON ({status})"] += 1
            return
        items = answer if isinstance(answer, list) else [answer]
        if not all(isinstance(i, dict) and i.get("jsonrpc") == "2.0" for i in items):
            self.bad[f"{kind}: not JSON-RPC"] += 1
        elif (
            isinstance(call, dict)
            and isinstance(answer, dict)
            and kind == "read"
            and answer.get("id") != call["id"]
        ):
            self.bad[f"{kind}: id changed"] += 1

    async def malformed(self) -> None:
        """Garbage after a valid request on one connection: the valid one is answered."""
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            writer.write(b"\x00\x01 NOT HTTP\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.read(4096), 10)
            writer.close()
            status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
            self.note("malformed", status)
        except (OSError, TimeoutError, ValueError, IndexError):
            self.kinds["malformed no answer"] += 1

    async def http_loop(self, session: aiohttp.ClientSession, rate: float) -> None:
        """Open loop at ``rate`` per second; each request its own task (bounded)."""
        gate = asyncio.Semaphore(256)
        tasks: set[asyncio.Task[None]] = set()
        interval = 1.0 / rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if gate.locked():
                self.kinds["generator behind"] += 1
                continue

            async def one() -> None:
                async with gate:
                    await self.http(session)

            task = asyncio.ensure_future(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def ws_churn(self, session: aiohttp.ClientSession, per_s: float) -> None:
        """Sockets opened at ``per_s``: a few calls, held a while or not, then closed or dropped."""
        held: set[asyncio.Task[None]] = set()
        while not self.stop.is_set():
            await asyncio.sleep(self.rng.expovariate(per_s))
            if len(held) >= 200:
                self.kinds["ws generator behind"] += 1
                continue
            task = asyncio.ensure_future(self._ws_one(session))
            held.add(task)
            task.add_done_callback(held.discard)
        await asyncio.gather(*held, return_exceptions=True)

    async def _ws_one(self, session: aiohttp.ClientSession) -> None:
        rng = self.rng
        key = rng.choice(self.keys)
        hold = rng.uniform(1.0, 20.0) if rng.random() < 0.3 else 0.0
        try:
            async with session.ws_connect(f"{self.url}/bsc/{key}") as ws:
                for _ in range(rng.randrange(1, 4)):
                    await ws.send_str(json.dumps(_call(rng)))
                    msg = await ws.receive(timeout=10)
                    self.kinds[f"ws {msg.type.name.lower()}"] += 1
                if hold:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), hold)
                if rng.random() < 0.3:  # drop without a close frame
                    conn = getattr(ws._response, "connection", None)
                    transport = getattr(conn, "transport", None)
                    if transport is not None:
                        transport.abort()
                    self.kinds["ws dropped"] += 1
                    return
            self.kinds["ws closed"] += 1
        except Exception as exc:  # a generator that dies would measure nothing
            self.kinds[f"ws {type(exc).__name__}"] += 1

    async def hostile(self, per_s: float) -> None:
        """Slow heads, unread answers and resets, a few a second."""
        while not self.stop.is_set():
            await asyncio.sleep(self.rng.expovariate(per_s))
            what = self.rng.choice(["slow head", "unread answer", "reset"])
            self.kinds[what] += 1
            task = asyncio.ensure_future(self._hostile_one(what))
            self._hostile.add(task)
            task.add_done_callback(self._hostile.discard)

    async def _hostile_one(self, what: str) -> None:
        key = self.rng.choice(self.keys)
        body = json.dumps(_call(self.rng)).encode()
        req = (
            f"POST /bsc/{key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            _, writer = await asyncio.open_connection(self.host, self.port)
            try:
                if what == "slow head":
                    for i in range(40):  # ~20 s if the gateway allowed it
                        writer.write(req[i : i + 1])
                        await writer.drain()
                        await asyncio.sleep(0.5)
                elif what == "unread answer":
                    big = json.dumps([_call(self.rng, "eth_getBlockByNumber") for _ in range(50)])
                    writer.write(req.replace(body, big.encode()).replace(
                        b"Content-Length: %d" % len(body), b"Content-Length: %d" % len(big)
                    ) * 20)  # fmt: skip
                    await writer.drain()
                    await asyncio.sleep(15)
                else:
                    writer.write(req[: len(req) // 2])
                    await writer.drain()
                    transport = writer.transport
                    sock = transport.get_extra_info("socket")
                    if sock is not None:  # linger 0: the close is a reset
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    transport.abort()
            finally:
                writer.close()


# ---- sampling -------------------------------------------------------------------
