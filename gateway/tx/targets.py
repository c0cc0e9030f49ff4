"""The two kinds of ``routes.Target``: public nodes (the pool's) and private endpoints.

Public nodes are the network's nodes in service now, each sent to once
through the pool (``NodePool.send_to``: timed, counted, and a failing node
taken out as for any call), or, with ``tx_broadcast = "one"``, one node
chosen like any call (``NodePool.forward_from``, which retries a
non-idempotent call only when it certainly never arrived). Private
endpoints (builders, relays) are HTTPS JSON-RPC endpoints reached through
the transaction session, each in its dialect (``tx.dialects``); logs and
the transaction log name them by their configured name (by default the
URL's host, never its path or query, which may carry an API key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from gateway.config import BuilderConfig, NetworkConfig
from gateway.tx.dialects import Voice
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
    session: aiohttp.ClientSession, builders: Sequence[BuilderConfig], timeout_s: float
) -> list[Target]:
    """One target per private endpoint of a network, each spoken to in its dialect.

    A builder's answer that is a JSON-RPC response (a result, or an error in
    its words: "nonce too low", "insufficient funds") is an answer whatever
    its HTTP status, so the client gets the builder's words; only no answer
    (refused, reset, timed out) or one that is not JSON-RPC (a proxy's HTML
    502) counts as the builder failing.
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    def sender(voice: Voice) -> Send:
        url = voice.builder.url

        async def send(message: Message) -> bytes:
            body = voice.body(message, message.gid)
            async with session.post(
                url, data=body, headers=voice.headers(), timeout=timeout
            ) as resp:
                payload = await resp.content.read(_MAX_ANSWER)
                if resp.status >= 400 and not _is_response(payload):
                    raise UpstreamError(f"{voice.builder.name}: HTTP {resp.status}")
                return payload

        return send

    return [Target(b.name, sender(Voice.of(b))) for b in builders]


def _is_response(payload: bytes) -> bool:
    """Whether ``payload`` is a JSON-RPC response object (a result or an error)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and ("result" in obj or isinstance(obj.get("error"), dict))
