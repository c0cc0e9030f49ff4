"""Confirming a node's claimed head over its HTTP: the half of the head rule that does I/O.

A ``newHeads`` header (or an ``eth_blockNumber`` answer above the network
head) is only a claim; the head tracker (``gateway.intel.head``) counts it
once the same node's HTTP answer for that block number carries the same
hash. ``HeadConfirms.ask`` fetches that block (``eth_getBlockByNumber``,
without transactions) from that node and feeds what came back to
``NetworkIntel.vouch``: at most one fetch per node in flight, and a header
that arrives meanwhile is fetched next (only the newest: an older one says
nothing the newer does not). The fetch carries the gateway's own check id,
so mock nodes do not count it as a client call, and it is capped at one
attempt's timeout; a failure confirms nothing and costs the node nothing
here (its probe judges its health).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import orjson

from gateway.intel.head import block_mark, block_parent, block_stamp
from gateway.intel.network import NetworkIntel
from gateway.upstream.errors import UpstreamError
from gateway.upstream.node import Node
from gateway.upstream.nodeclient import NodeStream

_CHECK_ID: Final = b'"gateway-chain-check"'  # the probe's id: not a client call
_MAX_BLOCK_BYTES: Final = 1 << 20  # a block without transactions is a few KB
_BACKFILL: Final = 4  # blocks below a confirmed one fetched to close a gap


def block_request(number: int) -> bytes:
    """The HTTP call that asks a node for block ``number`` (hashes of its transactions only)."""
    return b'{"jsonrpc":"2.0","id":%s,"method":"eth_getBlockByNumber","params":["%s",false]}' % (
        _CHECK_ID,
        hex(number).encode(),
    )


class HeadConfirms:
    """One network's confirmation fetches, one task per node at a time."""

    def __init__(self, intel: NetworkIntel, timeout_s: float) -> None:
        self.intel = intel
        self.timeout_s = timeout_s
        self._wanted: dict[str, int] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def ask(self, node: Node, number: int) -> asyncio.Task[None]:
        """Have ``node``'s block ``number`` (or a newer wanted one) fetched; the task doing it."""
        name = node.name
        if number > self._wanted.get(name, -1):
            self._wanted[name] = number
        task = self._tasks.get(name)
        if task is None or task.done():
            task = asyncio.create_task(self._run(node), name=f"head-confirm-{name}")
            self._tasks[name] = task
        return task

    async def confirm(self, node: Node, number: int) -> None:
        """``ask`` and wait for it (never cancelling it for other waiters)."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self.ask(node, number))

    async def _run(self, node: Node) -> None:
        done = -1
        while self._wanted.get(node.name, -1) > done:
            done = self._wanted[node.name]
            await self._fetch(node, done)
            # The blocks just below that the node has not confirmed yet (a header
            # missed while a fetch was in flight): agreement counts only hashes a
            # node confirmed, so a gap would hold the head back. The fetched
            # block's parent covers the one below it.
            heads = self.intel.heads
            for number in range(done - 2, done - 2 - _BACKFILL, -1):
                if number < 0 or heads.knows(node.name, number):
                    break
                await self._fetch(node, number)

    async def _fetch(self, node: Node, number: int) -> None:
        transport = node.transport
        if transport is None or not node.in_service():
            return
        try:
            reply = await transport.post(
                block_request(number), self.timeout_s, _MAX_BLOCK_BYTES, None
            )
        except UpstreamError:
            return
        if isinstance(reply, NodeStream):  # pragma: no cover - no stream_over asked
            reply.close()
            return
        try:
            answer = orjson.loads(reply)
        except orjson.JSONDecodeError:
            return
        block = answer.get("result") if type(answer) is dict else None
        mark = block_mark(block)
        if mark is None or mark[0] != number or not node.in_service():
            return  # not (yet) served over HTTP: the claim confirms nothing
        self.intel.vouch(
            node.name,
            number,
            mark[1],
            pushed=node.newheads,
            stamp=block_stamp(block),
            parent=block_parent(block),
        )
        confirmed = self.intel.heads.node_head(node.name)
        if confirmed is not None:
            node.head = confirmed

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
