"""How one call reaches one node: the ``Transport`` protocol and its two implementations.

``upstream.client = "lean"`` (default) sends calls through
``upstream.nodeclient`` (keep-alive connections + aiohttp's C response
parser; ~35 µs of CPU per call against ~140 µs through a ClientSession, see
docs/PERFORMANCE.md); ``"aiohttp"`` uses the pool's ``ClientSession``. Both
turn every failure into ``UpstreamError`` (``upstream.errors``) named after
the node, never its URL (it may hold a provider's key), and judge the HTTP
status the same way, so the pool cannot tell them apart.
"""

from __future__ import annotations

from typing import Final, Protocol

import aiohttp

from gateway.upstream.errors import UpstreamError, judge, too_large
from gateway.upstream.nodeclient import NodeClient, NodeStream

JSON_HEADERS: Final = {"Content-Type": "application/json"}


class Transport(Protocol):
    """Sends one body to one node; the answer to relay, or ``UpstreamError``."""

    async def post(
        self,
        body: bytes,
        timeout_s: float,
        max_bytes: int | None,
        stream_over: int | None,
        traceparent: bytes | None = None,
    ) -> bytes | NodeStream:
        """The node's answer (any 2xx, or a relayed 4xx JSON-RPC error).

        ``stream_over``: a longer 2xx answer may come as a ``NodeStream`` the
        caller must read to the end or close (a transport may ignore it).
        ``traceparent``: the W3C header the node gets (tracing on).
        """
        ...

    async def close(self) -> None: ...


class LeanTransport:
    """One node through the lean client (the default)."""

    __slots__ = ("client", "name")

    def __init__(self, name: str, client: NodeClient) -> None:
        self.name = name
        self.client = client

    async def post(
        self,
        body: bytes,
        timeout_s: float,
        max_bytes: int | None,
        stream_over: int | None,
        traceparent: bytes | None = None,
    ) -> bytes | NodeStream:
        try:
            status, payload = await self.client.post(
                body,
                timeout_s,
                max_bytes=max_bytes,
                stream_over=stream_over,
                traceparent=traceparent,
            )
        except UpstreamError as exc:
            if exc.too_large:
                raise too_large(self.name) from None
            raise UpstreamError(f"{self.name}: {exc}", timeout=exc.timeout, sent=exc.sent) from None
        is_json = isinstance(payload, bytes) and payload[:1] in (b"{", b"[")
        return judge(self.name, status, payload, is_json)

    async def close(self) -> None:
        await self.client.close()


class AiohttpTransport:
    """One node through the pool's shared ``aiohttp.ClientSession``; never streams."""

    __slots__ = ("connect_timeout_s", "name", "session", "url")

    def __init__(
        self, name: str, url: str, session: aiohttp.ClientSession, connect_timeout_s: float
    ) -> None:
        self.name = name
        self.url = url
        self.session = session
        self.connect_timeout_s = connect_timeout_s

    async def post(
        self,
        body: bytes,
        timeout_s: float,
        max_bytes: int | None,
        stream_over: int | None,
        traceparent: bytes | None = None,
    ) -> bytes | NodeStream:
        name = self.name
        limit = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.connect_timeout_s)
        headers = JSON_HEADERS
        if traceparent is not None:
            headers = {**JSON_HEADERS, "traceparent": traceparent.decode("ascii")}
        try:
            async with self.session.post(
                self.url, data=body, headers=headers, timeout=limit
            ) as resp:
                status = resp.status
                if max_bytes is None:
                    payload = await resp.read()
                else:
                    if resp.content_length is not None and resp.content_length > max_bytes:
                        raise too_large(name)
                    payload = await resp.content.read(max_bytes + 1)
                    while not resp.content.at_eof() and len(payload) <= max_bytes:
                        payload += await resp.content.read(max_bytes + 1 - len(payload))
                    if len(payload) > max_bytes:
                        raise too_large(name)
        except aiohttp.ConnectionTimeoutError:
            raise UpstreamError(f"{name}: connect timed out", timeout=True, sent=False) from None
        except TimeoutError:
            raise UpstreamError(f"{name}: timed out", timeout=True) from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(
                f"{name}: unreachable ({exc.os_error.__class__.__name__})", sent=False
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"{name}: failed ({exc.__class__.__name__})") from None
        return judge(name, status, payload, payload[:1] in (b"{", b"["))

    async def close(self) -> None:
        """The session belongs to the pool, which closes it."""
