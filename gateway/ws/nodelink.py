"""One WebSocket to one node: calls by id, subscription notifications to a callback.

Opened with aiohttp's client ``ws_connect``. Ids on this socket are the
gateway's own counters (a node never sees a client's id). A result that
creates a subscription is bound to its owner *in the reader*, before the
next frame is read, so a notification that follows its subscription's
answer immediately is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

Notify = Callable[[str, bytes, Any], None]
Bind = Callable[[Any], None]


class LinkError(Exception):
    """The node socket closed, timed out, or answered with a JSON-RPC error."""

    def __init__(self, message: str, error: Any = None) -> None:
        super().__init__(message)
        self.error = error  # the node's error object, when it sent one


class NodeLink:
    """A live socket to one node; ``closed`` resolves when it ends."""

    def __init__(self, name: str, on_notify: Notify) -> None:
        self.name = name
        self._on_notify = on_notify
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Bind | None]] = {}
        self._ws: aiohttp.ClientWebSocketResponse[bool] | None = None
        self._reader: asyncio.Task[None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def open(self, session: aiohttp.ClientSession, url: str, timeout_s: float) -> None:
        self._ws = await session.ws_connect(
            url,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=timeout_s),
            heartbeat=max(timeout_s, 1.0) * 3,
            max_msg_size=0,
            decode_text=False,
            autoclose=True,
        )
        self._reader = asyncio.create_task(self._read(self._ws), name=f"ws-link-{self.name}")

    async def call(
        self, method: str, params: list[Any], timeout_s: float, bind: Bind | None = None
    ) -> Any:
        """The node's ``result``; ``bind(result)`` runs in the reader, before the next frame."""
        ws = self._ws
        if ws is None or ws.closed or self.closed.done():
            raise LinkError("node socket closed")
        ident = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = (fut, bind)
        body = orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        try:
            await ws.send_bytes(body)
            return await asyncio.wait_for(fut, timeout_s)
        except (TimeoutError, ConnectionError, RuntimeError) as exc:
            raise LinkError(f"{method}: {type(exc).__name__}") from None
        finally:
            self._pending.pop(ident, None)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
        notify = self._on_notify
        pending = self._pending
        try:
            async for msg in ws:
                if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break
                data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    continue
                if type(obj) is not dict:
                    continue
                if obj.get("method") == "eth_subscription":
                    params = obj.get("params")
                    if type(params) is dict and type(params.get("subscription")) is str:
                        notify(params["subscription"], data, params.get("result"))
                    continue
                ident = obj.get("id")
                entry = pending.pop(ident, None) if type(ident) is int else None
                if entry is None:
                    continue
                fut, bind = entry
                if fut.done():
                    continue
                if "error" in obj:
                    fut.set_exception(LinkError("node error", obj["error"]))
                else:
                    result = obj.get("result")
                    if bind is not None:
                        bind(result)
                    fut.set_result(result)
        finally:
            for fut, _ in list(pending.values()):
                if not fut.done():
                    fut.set_exception(LinkError("node socket closed"))
            pending.clear()
            if not self.closed.done():
                self.closed.set_result(None)

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if not self.closed.done():
            self.closed.set_result(None)
