"""WebSocket (RFC 6455) over a raw socket: any frame, well formed or not.

Client libraries refuse to send what the fuzzer needs (reserved bits,
unknown opcodes, fragments out of order, control frames over 125 bytes),
so the frames are built here byte by byte and the server's frames read back
the same way.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from dataclasses import dataclass

from tests.helpers.rawhttp import split_responses

TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


@dataclass(frozen=True, slots=True)
class Frame:
    opcode: int
    payload: bytes
    fin: bool = True


def encode(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """One frame; a client's frames are masked (RFC 6455 §5.3)."""
    first = (0x80 if fin else 0) | ((rsv & 7) << 4) | (opcode & 0xF)
    n = len(payload)
    mask_bit = 0x80 if masked else 0
    if n < 126:
        head = struct.pack("!BB", first, mask_bit | n)
    elif n < 65536:
        head = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + body


class RawWs:
    """A connected, upgraded socket; ``read`` returns the server's next frame or None on EOF."""

    def __init__(self, port: int, path: str, *, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, self._buf = buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1]) if head else 0
        if self.status != 101:  # a refusal: keep its body readable
            got, _ = split_responses(buf)
            self.refusal = got[0] if got else None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _need(self, n: int) -> bool:
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return False
            if not chunk:
                return False
            self._buf += chunk
        return True

    def read(self) -> Frame | None:
        if not self._need(2):
            return None
        b0, b1 = self._buf[0], self._buf[1]
        n = b1 & 0x7F
        at = 2
        if n == 126:
            if not self._need(4):
                return None
            n = struct.unpack("!H", self._buf[2:4])[0]
            at = 4
        elif n == 127:
            if not self._need(10):
                return None
            n = struct.unpack("!Q", self._buf[2:10])[0]
            at = 10
        if not self._need(at + n):
            return None
        payload = self._buf[at : at + n]
        self._buf = self._buf[at + n :]
        return Frame(b0 & 0xF, payload, bool(b0 & 0x80))

    def close(self) -> None:
        self.sock.close()
