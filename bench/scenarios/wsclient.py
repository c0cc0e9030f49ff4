"""The ws scenario's client: a lean WebSocket client (one subscription per socket,
frames parsed by hand), so thousands of sockets fit in one generator process and
its CPU per notification stays small next to the gateway's.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from typing import Any

_SUB = b'{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}'
_STAMP = b'"emittedAt":'


def _masked(opcode: int, payload: bytes) -> bytes:
    """A client frame (clients must mask), payload under 126 bytes."""
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + mask + body


class LeanSocket(asyncio.Protocol):
    """A minimal WebSocket client: handshake, subscribe, read stamps, answer pings.

    The load generator must cost far less than the gateway, or the latency
    measured is the client's: aiohttp's client spends ~40 µs a message, this
    ~3 µs (one ``find`` and a ``float`` per notification, no JSON parse).
    """

    def __init__(self, path: str, host: str, lat: list[float], ready: asyncio.Future[str]):
        self.path, self.host, self.lat, self.ready = path, host, lat, ready
        self.buf = bytearray()
        self.upgraded = False
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        self.transport.write(
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                if not self.ready.done():
                    self.ready.set_result("http_" + bytes(buf[9:12]).decode(errors="replace"))
                return
            del buf[: end + 4]
            self.upgraded = True
            assert self.transport is not None
            self.transport.write(_masked(0x1, _SUB))
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            opcode = buf[pos] & 0x0F
            size = buf[pos + 1] & 0x7F
            head = 2
            if size == 126:
                if n - pos < 4:
                    break
                size = int.from_bytes(buf[pos + 2 : pos + 4], "big")
                head = 4
            elif size == 127:
                if n - pos < 10:
                    break
                size = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            if n - pos < head + size:
                break
            start = pos + head
            pos = start + size
            if opcode == 0x9 and self.transport is not None:  # ping: pong the same payload
                self.transport.write(_masked(0xA, bytes(buf[start:pos])))
                continue
            if opcode != 0x1:
                continue
            at = buf.find(_STAMP, start, pos)
            if at < 0:
                if not self.ready.done():
                    body = bytes(buf[start:pos])
                    self.ready.set_result("" if b'"result"' in body else body.decode()[-120:])
                continue
            at += len(_STAMP)
            stop = at
            while buf[stop] in b"0123456789.eE+-":
                stop += 1
            self.lat.append(time.time() - float(buf[at:stop]))
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_result("connection lost")
