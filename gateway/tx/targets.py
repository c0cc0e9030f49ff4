"""The two kinds of ``routes.Target``: public nodes (the pool's) and private endpoints.

Public nodes are the network's nodes in service now, each sent to once
through the pool (``NodePool.send_to``: timed, counted, and a failing node
taken out as for any call), or, with ``tx_broadcast = "one"``, one node
chosen like any call (``NodePool.forward_from``, which retries a
non-idempotent call only when it certainly never arrived). Private
endpoints (builders, relays) are plain HTTPS JSON-RPC endpoints reached
through the transaction session; their URLs may carry an API key, so logs
and the transaction log name them with the key masked (``redact_url``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from gateway.config import NetworkConfig
from gateway.config.redact import redact_url
from gateway.tx.routes import Message, Send, Target
from gateway.upstream.pool import NodePool, UpstreamError

_MAX_ANSWER = 1 << 20  # a send's answer is a hash or an error: anything longer is not one


class PublicNodes:
    """The public route of one network."""

    def __init__(self, pool: NodePool, cfg: NetworkConfig) -> None:
        self.pool = pool
        self.cfg = cfg

    def targets(self) -> list[Target]:
        pool = self.pool
        if self.cfg.tx_broadcast == "one":
            return [Target("one node", self._one)] if pool.serving() else []
        return [Target(node.name, self._to(node)) for node in pool.in_service()]

    def _to(self, node: Any) -> Send:
        async def send(message: Message) -> bytes:
            return await self.pool.send_to(node, message.body, self.cfg.tx_timeout_s)

        return send

    async def _one(self, message: Message) -> bytes:
        payload, _node = await self.pool.forward_from(message.body, idempotent=False)
        assert isinstance(payload, bytes)  # no stream_over: always buffered
        return payload

    async def find(self, body: bytes) -> str | None:
        """The first node that returns the transaction of ``body`` (a by-hash lookup), or None."""
        nodes = self.pool.in_service()

        async def ask(node: Any) -> str | None:
            try:
                answer = orjson.loads(await self.pool.send_to(node, body, self.cfg.tx_timeout_s))
            except (UpstreamError, orjson.JSONDecodeError):
                return None
            ok = isinstance(answer, dict) and isinstance(answer.get("result"), dict)
            return str(node.name) if ok else None

        for found in await asyncio.gather(*(ask(n) for n in nodes)):
            if found is not None:
                return found
        return None


def private_targets(
    session: aiohttp.ClientSession, urls: tuple[str, ...], timeout_s: float
) -> list[Target]:
    """One target per private endpoint of a network."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    def sender(url: str) -> Send:
        async def send(message: Message) -> bytes:
            headers = {"Content-Type": "application/json"}
            async with session.post(
                url, data=message.body, headers=headers, timeout=timeout
            ) as resp:
                payload = await resp.content.read(_MAX_ANSWER)
                if resp.status >= 500 or resp.status in (401, 403, 404, 405, 429):
                    raise UpstreamError(f"{redact_url(url)}: HTTP {resp.status}")
                return payload

        return send

    return [Target(redact_url(url), sender(url)) for url in urls]
