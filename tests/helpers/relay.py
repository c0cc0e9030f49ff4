"""A relay in front of a real node that plays a node with limits, counting what it saw.

``NodeRelay(url, ...)`` is a small aiohttp server on a free port that
forwards each call (each member of a batch on its own) to the node at
``url`` and answers with the node's answer, except where it plays a
limited node:

- ``max_logs_range``: an ``eth_getLogs`` over more blocks is refused in
  ``refusal`` words (geth's and BSC's by default);
- ``state_blocks``: a state read at a block older than that many blocks
  below the node's head gets geth's ``missing trie node`` (a pruned node);
- ``delay``: seconds to wait before answering a method (a slow trace).

``seen`` lists every (method, params) it received, so a test can say what
reached this node and what never did.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from gateway.redis.embedded import LOOPBACK

GETH_RANGE = "exceed maximum block range: {limit}"
RESULTS = "query returned more than 10000 results"
_STATE_AT = {
    "eth_call": 1,
    "eth_getBalance": 1,
    "eth_getCode": 1,
    "eth_getStorageAt": 2,
    "eth_getProof": 2,
    "eth_getTransactionCount": 1,
    "eth_estimateGas": 1,
    "eth_createAccessList": 1,
}


class NodeRelay:
    def __init__(
        self,
        url: str,
        *,
        max_logs_range: int = 0,
        refusal: str = GETH_RANGE,
        state_blocks: int = 0,
        delay: dict[str, float] | None = None,
    ) -> None:
        self.node = url
        self.max_logs_range = max_logs_range
        self.refusal = refusal
        self.state_blocks = state_blocks
        self.delay = delay or {}
        self.seen: list[tuple[str, Any]] = []
        self.refused = 0
        self.in_flight: dict[str, int] = {}  # calls of a method being answered now
        self.most_in_flight: dict[str, int] = {}  # ... and the most at once
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> NodeRelay:
        app = web.Application()
        app.router.add_post("/", self._handle)
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{LOOPBACK}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def calls(self, method: str) -> list[Any]:
        """The params of every ``method`` call this node received."""
        return [params for m, params in self.seen if m == method]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body, list):
            answers = await asyncio.gather(*(self._one(call) for call in body))
            return web.json_response(list(answers))
        return web.json_response(await self._one(body))

    async def _one(self, call: dict[str, Any]) -> dict[str, Any]:
        method, params = call.get("method", ""), call.get("params", [])
        self.seen.append((method, params))
        now = self.in_flight[method] = self.in_flight.get(method, 0) + 1
        self.most_in_flight[method] = max(now, self.most_in_flight.get(method, 0))
        try:
            wait = self.delay.get(method, 0.0)
            if wait:
                await asyncio.sleep(wait)
            refusal = await self._refusal(method, params)
            if refusal is not None:
                self.refused += 1
                return {"jsonrpc": "2.0", "id": call.get("id"), "error": refusal}
            return await self._ask(call)
        finally:
            self.in_flight[method] -= 1

    async def _ask(self, call: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.post(self.node, json=call) as resp:
            answer: dict[str, Any] = await resp.json(content_type=None)
        return answer

    async def _head(self) -> int:
        answer = await self._ask({"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber"})
        return int(answer["result"], 16)

    async def _refusal(self, method: str, params: Any) -> dict[str, Any] | None:
        if method == "eth_getLogs" and self.max_logs_range:
            spec = params[0]
            low = await self._number(spec.get("fromBlock", "latest"))
            high = await self._number(spec.get("toBlock", "latest"))
            if high - low + 1 > self.max_logs_range:
                return {"code": -32000, "message": self.refusal.format(limit=self.max_logs_range)}
        index = _STATE_AT.get(method)
        if index is not None and self.state_blocks and len(params) > index:
            ref = params[index]
            if isinstance(ref, dict):
                ref = ref.get("blockNumber", "latest")  # a blockHash: the node finds it
            if isinstance(ref, str) and ref.startswith("0x"):
                block = int(ref, 16)
                if block <= await self._head() - self.state_blocks:
                    return {
                        "code": -32000,
                        "message": "missing trie node 0000 (path ) state 0x0 is not available",
                    }
        return None

    async def _number(self, ref: str) -> int:
        if ref in ("latest", "pending", "safe", "finalized"):
            return await self._head()
        if ref == "earliest":
            return 0
        return int(ref, 16)
