"""HTTP/1.1 over a raw socket: send exact bytes, split what comes back into responses.

The fuzzer and the framing regression tests need what no client library
sends (pipelined requests in one write, a body that lies about its
encoding, odd ``Expect`` values) and need to see every answer the server
wrote, in order, before it closed.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RawResponse:
    """One response as it came off the wire."""

    status: int
    headers: dict[str, str]  # lower-cased names; the last one wins
    body: bytes


def request(
    path: str,
    body: bytes,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> bytes:
    """One request's bytes with a Content-Length matching ``body`` unless headers set one."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    extra = dict(headers or {})
    extra.setdefault("Content-Type", "application/json")
    if not any(k.lower() in ("content-length", "transfer-encoding") for k in extra):
        extra["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def split_responses(data: bytes) -> tuple[list[RawResponse], bytes]:
    """The complete responses at the start of ``data`` (Content-Length or chunked) and the rest."""
    out: list[RawResponse] = []
    while True:
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            return out, data
        head = data[:head_end].decode("latin-1").split("\r\n")
        if head[0].startswith("HTTP/1.1 100 "):  # interim: skip
            data = data[head_end + 4 :]
            continue
        status = int(head[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        rest = data[head_end + 4 :]
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, rest2 = _dechunk(rest)
            if body is None:
                return out, data
            out.append(RawResponse(status, headers, body))
            data = rest2
            continue
        length = int(headers.get("content-length", "0"))
        if len(rest) < length:
            return out, data
        out.append(RawResponse(status, headers, rest[:length]))
        data = rest[length:]


def _dechunk(data: bytes) -> tuple[bytes | None, bytes]:
    body = b""
    while True:
        line_end = data.find(b"\r\n")
        if line_end < 0:
            return None, b""
        size = int(data[:line_end].split(b";")[0], 16)
        start = line_end + 2
        if len(data) < start + size + 2:
            return None, b""
        body += data[start : start + size]
        data = data[start + size + 2 :]
        if size == 0:
            return body, data


def exchange(
    port: int, data: bytes, *, want: int = 1, timeout_s: float = 10.0, host: str = "127.0.0.1"
) -> tuple[list[RawResponse], bool]:
    """Send ``data`` in one write; read until ``want`` responses, a close or the timeout.

    Returns (responses, whether the server closed the connection).
    """
    deadline = time.monotonic() + timeout_s
    buf = b""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return split_responses(buf)[0], False
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return split_responses(buf)[0], False
            except ConnectionResetError:
                return split_responses(buf)[0], True
            if not chunk:
                return split_responses(buf)[0], True
            buf += chunk
            got = split_responses(buf)[0]
            if len(got) >= want and want > 0:
                return got, False


async def aexchange(
    port: int, data: bytes, *, want: int = 1, timeout_s: float = 10.0, host: str = "127.0.0.1"
) -> tuple[list[RawResponse], bool]:
    """``exchange`` for a test whose server runs in the same event loop."""
    reader, writer = await asyncio.open_connection(host, port)
    buf = b""
    closed = False
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    chunk = await reader.read(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    closed = True
                    break
                buf += chunk
                if want > 0 and len(split_responses(buf)[0]) >= want:
                    break
    except TimeoutError:
        pass
    finally:
        writer.close()
    return split_responses(buf)[0], closed


@functools.cache
def gzip_bomb() -> bytes:
    """About 1 MB of gzip that inflates to 1 GiB of zeros (made once per process)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(1024)]
    parts.append(packer.flush())
    return b"".join(parts)
