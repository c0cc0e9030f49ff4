"""``eth_getLogs`` over any range the plan allows: split into chunks nodes take, merged in order.

Nodes refuse wide log queries in their own words (geth and BSC: "exceed
maximum block range: 5000"; others "block range too large", "query
returned more than 10000 results", "Log response size exceeded"). Each
node's range limit is its ``max_logs_range`` from the node table, lowered
for the life of the process by what its refusals teach (the number in the
refusal when it gives one, else half the refused range; 0 = takes any
range). A call goes whole to the nodes that take its range
(``upstream.eligible``); one wider than every node in service takes, or
that a node just refused, is split here:

- chunks of the widest range a node in service takes, each fetched through
  the pool like any read (routed to a node that takes it and has its
  blocks, hedged, coalesced with identical chunks in flight), at most
  ``upstream.logs_split_concurrency`` at a time;
- a chunk a node refuses is split again to the limit its refusal taught
  (or in halves when it named none; down to one block, whose refusal is
  then the answer: nothing narrower can be asked), and a chunk not yet sent
  is split to the learnt limit before it is sent, so the call that teaches
  a limit is answered like any other;
- one client call makes at most ``upstream.logs_max_chunks`` node calls: a
  range that would need more answers -32602 before any node call, naming
  the widest range the nodes take, and a call whose re-splits would pass
  the bound answers the same -32602 when it gets there;
- each chunk's answer is cached on its own (a final chunk for good), so the
  next wide call over the same old blocks costs no node call;
- the answer is one chain: chunks are read at different moments, so the
  logs above the finalized block are checked against the nodes' canonical
  hashes once the chunks are in, and read again (from the nodes) from the
  first stale block where a re-org landed;
- the chunks' logs are merged in block order into one answer, equal to what
  a node without a limit answers; a node's other error is answered as is.

The whole call has one deadline (``limits.upstream_timeout_s``) and was
admitted (charged) once, before any chunk. The merged answer is held whole,
so it is bounded by ``limits.max_buffered_answer_bytes`` (502 above it).
Filter polls read through ``Reads.single`` and so split the same way.

It stays whole because its steps (the bound, the chunks, their re-splits,
settling into one chain) share one call's budget and deadline; what holds
no state (reading a refusal, the answer's parts) is ``rpc.logsparts``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

import orjson

from gateway.intel.cache import answer, call_key, result_bytes
from gateway.intel.methods import block_ref, param
from gateway.intel.policy import classify
from gateway.rpc import protocol as rpc
from gateway.rpc.logsparts import before, learn, merge, named_above, refusal_text
from gateway.upstream.pool import Node, NodePool, UpstreamError

if TYPE_CHECKING:
    from gateway.telemetry.tracer import Tracer

METHOD: Final = "eth_getLogs"
# Reads of a split's blocks above the finalized one until they are one chain.
_SETTLE_TRIES: Final = 3


class _Answered(Exception):
    """A chunk's node answered with an error that is not a range refusal: the call's answer."""

    def __init__(self, reply: bytes, gid: int, node: str) -> None:
        super().__init__("node error")
        self.reply = reply
        self.gid = gid
        self.node = node


class _TooMany(Exception):
    """The call would need more node calls than ``upstream.logs_max_chunks``."""


class _Budget:
    """The node calls one client call may still make."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def need(self, calls: int) -> None:
        """Raise ``_TooMany`` unless ``calls`` more node calls fit."""
        if calls > self.left:
            raise _TooMany

    def take(self) -> None:
        """Count one node call."""
        self.need(1)
        self.left -= 1


class LogSplitter:
    """One network's log splitting; bound to its pool like ``Reads``."""

    def __init__(
        self,
        pool: NodePool,
        next_gids: Callable[[int], int],
        *,
        concurrency: int,
        timeout_s: float,
        max_bytes: int,
        max_chunks: int = 64,
    ) -> None:
        self.pool = pool
        self.next_gids = next_gids
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_chunks = max(1, max_chunks)
        self.tracer: Tracer | None = None  # set by Pipeline.trace_with

    def limit(self) -> int:
        """The widest range a node in service takes (0: one takes any range).

        Each chunk goes to the nodes that take it (``Route.logs_span``), so a
        node with a small limit never makes the others' chunks small.
        """
        limits = [n.logs_limit for n in self.pool.nodes if n.in_service()]
        return 0 if not limits or min(limits) <= 0 else max(limits)

    def saw(self, node: Node, params: Any, reply: bytes) -> None:
        """An unsplit call's answer: learn from a range refusal (``Reads.single``)."""
        text = refusal_text(reply)
        span = self._span(params)
        if text is not None and span is not None:
            learn(node, span[1] - span[0] + 1, text)

    def _span(self, params: Any) -> tuple[int, int] | None:
        spec = param(params, 0)
        if type(spec) is not dict or "blockHash" in spec:
            return None
        heads = self.pool.intel.heads
        ends: list[int] = []
        for name in ("fromBlock", "toBlock"):
            ref = block_ref(spec.get(name, "latest"))
            number = heads.resolve("latest" if ref == "pending" else ref)
            if number is None:
                return None
            ends.append(number)
        return (ends[0], ends[1]) if ends[0] <= ends[1] else None

    async def single(self, call: rpc.Call, *, refused: bool = False) -> tuple[bytes, bool] | None:
        """The call answered by chunks (answer, is an error), or None: send it whole.

        ``refused``: a node just refused it whole, so it is split even when
        no limit is known (in halves).
        """
        span = self._span(call.params)
        if span is None:
            return None
        low, high = span
        size = high - low + 1
        limit = self.limit()
        if limit <= 0 or limit >= size:
            if not refused or size == 1:
                return None
            limit = -(-size // 2)
        # The whole call a node refused was one node call of the bound already.
        budget = _Budget(self.max_chunks - 1 if refused else self.max_chunks)
        if -(-size // limit) > budget.left:
            return self._too_many(call, size), True
        spec = dict(param(call.params, 0))
        served: list[str] = []  # the node of each chunk a node answered
        tracer = self.tracer
        try:
            async with asyncio.timeout(self.timeout_s):
                fetch = self._fetch(spec, low, high, limit, served, budget)
                if tracer is not None:
                    blocks = {
                        "rpc_gateway.logs.blocks": size,
                        "rpc_gateway.logs.chunk_blocks": limit,
                    }
                    fetch = tracer.within("logs.split", fetch, blocks)
                parts = await fetch
        except _TooMany:
            return self._too_many(call, size), True
        except TimeoutError:
            raise UpstreamError(
                f"{self.pool.network.name}: deadline reached", timeout=True
            ) from None
        except _Answered as done:
            call.served, call.node = "miss", done.node
            return rpc.restore_single(done.reply, done.gid, call.id)
        names = list(dict.fromkeys(served))  # each node once, in order
        call.served, call.node = ("miss", ",".join(names)) if names else ("hit", "cache")
        merged = merge(parts)
        if len(merged) > self.max_bytes:
            raise UpstreamError(
                "eth_getLogs answer over limits.max_buffered_answer_bytes", too_large=True
            )
        return answer(orjson.dumps(call.id), merged), False

    def _too_many(self, call: rpc.Call, size: int) -> bytes:
        """The -32602 answer for a range that needs more node calls than the bound."""
        limit = max(1, self.limit())
        calls = -(-size // limit)
        widest = limit * self.max_chunks
        unit = "block" if limit == 1 else "blocks"
        reason = (
            f"eth_getLogs over {size} blocks needs {calls} node calls, the nodes take at most "
            f"{limit} {unit} per call; ask for at most {widest} blocks"
        )
        error = {
            "code": rpc.INVALID_PARAMS.code,
            "message": f"{rpc.INVALID_PARAMS.message}: {reason}",
            "data": {
                "reason": reason,
                "node_logs_range": limit,
                "max_logs_range": widest,
                "requested_range": size,
                "logs_max_chunks": self.max_chunks,
            },
        }
        call.served, call.node = "local", ""
        return orjson.dumps({"jsonrpc": "2.0", "id": call.id, "error": error})

    async def _fetch(
        self,
        spec: dict[str, Any],
        low: int,
        high: int,
        size: int,
        served: list[str],
        budget: _Budget,
    ) -> list[bytes]:
        gate = asyncio.Semaphore(self.concurrency)
        parts = await self._split(spec, low, high, size, gate, served, budget)
        return await self._settle(spec, low, high, size, parts, gate, served, budget)

    async def _settle(
        self,
        spec: dict[str, Any],
        low: int,
        high: int,
        size: int,
        parts: list[bytes],
        gate: asyncio.Semaphore,
        served: list[str],
        budget: _Budget,
    ) -> list[bytes]:
        """``parts`` made one chain: the logs above the finalized block checked against
        the canonical hashes now, and the blocks from the first stale one read again.

        Chunks read at different moments may straddle a re-org (old fork below,
        new fork above): an answer no node ever had. Final blocks cannot
        re-org, so only the tail is checked, with one batch of block reads.
        """
        for _ in range(_SETTLE_TRIES):
            final = self.pool.intel.heads.resolve("finalized")
            final = low - 1 if final is None else final
            if high <= final:
                return parts
            named = named_above(parts, final)
            if not named:
                return parts
            canonical = await self._canonical(sorted(named))
            stale = [n for n, digest in named.items() if canonical.get(n) != digest]
            if not stale:
                return parts
            first = min(stale)
            budget.need(-(-(high - first + 1) // size))
            kept = before(parts, first)
            # read from the nodes, not the cache: it may hold the old fork's chunk
            parts = kept + await self._split(
                spec, first, high, size, gate, served, budget, fresh=True
            )
        raise UpstreamError(
            f"{self.pool.network.name}: eth_getLogs: the chain re-organised during every read"
        )

    async def _canonical(self, numbers: list[int]) -> dict[int, str]:
        """The hash of each block in ``numbers`` on the chain the nodes have now."""
        calls = [
            rpc.Call(method="eth_getBlockByNumber", params=[hex(n), False], id=n, has_id=True)
            for n in numbers
        ]
        first = self.next_gids(len(calls))
        body = rpc.encode_batch(calls, first)
        reply, _node = await self.pool.forward_from(body, min_block=numbers[-1])
        assert isinstance(reply, bytes)
        hashes: dict[int, str] = {}
        try:
            answers = orjson.loads(reply)
        except orjson.JSONDecodeError:
            return hashes
        for item in answers if type(answers) is list else ():
            block = item.get("result") if type(item) is dict else None
            if type(block) is dict and type(block.get("number")) is str:
                hashes[int(block["number"], 16)] = str(block.get("hash"))
        return hashes

    async def _split(
        self,
        spec: dict[str, Any],
        low: int,
        high: int,
        size: int,
        gate: asyncio.Semaphore,
        served: list[str],
        budget: _Budget,
        *,
        fresh: bool = False,
    ) -> list[bytes]:
        """``low..high`` in chunks of ``size`` blocks, in order (``fresh``: not from the cache)."""
        bounds = [(lo, min(high, lo + size - 1)) for lo in range(low, high + 1, size)]
        chunks = [self._chunk(spec, lo, hi, gate, served, budget, fresh) for lo, hi in bounds]
        tracer = self.tracer
        if tracer is not None:
            chunks = [
                tracer.within(
                    "logs.chunk", chunk, {"rpc_gateway.logs.from": lo, "rpc_gateway.logs.to": hi}
                )
                for chunk, (lo, hi) in zip(chunks, bounds, strict=True)
            ]
        return await _gather(chunks)

    async def _chunk(
        self,
        spec: dict[str, Any],
        low: int,
        high: int,
        gate: asyncio.Semaphore,
        served: list[str],
        budget: _Budget,
        fresh: bool = False,
    ) -> list[bytes]:
        """One chunk's result bytes (a JSON list), from the cache or a node; split if refused."""
        params = [{**spec, "fromBlock": hex(low), "toBlock": hex(high)}]
        intel = self.pool.intel
        head = intel.heads.head
        policy = classify(METHOD, params, head)
        key = call_key(METHOD, params)
        cache = intel.cache
        if cache is not None and not fresh:
            hit = cache.get(METHOD, key, policy, head)
            if hit is not None:
                return [hit]
        span = high - low + 1
        async with gate:
            # A limit learnt while this chunk waited (another chunk's refusal):
            # no node may take it any more, so it is split before it is sent.
            limit = self.limit()
            if 0 < limit < span:
                budget.need(-(-span // limit))
                wider = True
            else:
                budget.take()
                wider = False
                reply, gid, node = await self._ask(params, key, high, head.tag)
        if wider:
            return await self._split(spec, low, high, limit, gate, served, budget, fresh=fresh)
        served.append(node.name)
        result = result_bytes(reply)
        if result is None:
            text = refusal_text(reply)
            if text is None or high == low:
                raise _Answered(reply, gid, node.name)
            learn(node, span, text)
            limit = self.limit()
            size = limit if 0 < limit < span else -(-span // 2)
            budget.need(-(-span // size))
            return await self._split(spec, low, high, size, gate, served, budget, fresh=fresh)
        if cache is not None:
            cache.put(key, policy, head, result, node_head=intel.heads.node_head(node.name))
        self._note_blocks(result)
        return [result]

    async def _ask(
        self, params: list[Any], key: bytes, high: int, tag: Any
    ) -> tuple[bytes, int, Node]:
        """One chunk from a node, shared with an identical chunk already in flight."""

        async def flight() -> tuple[bytes, int, Node]:
            gid = self.next_gids(1)
            body = rpc.encode_call(rpc.Call(method=METHOD, params=params, id=0, has_id=True), gid)
            route = self.pool.route(((METHOD, params),))
            reply, node = await self.pool.forward_from(
                body, hedge=True, min_block=high, route=route
            )
            assert isinstance(reply, bytes)  # no stream_over: always whole
            return reply, gid, node

        coalescer = self.pool.intel.coalescer
        if coalescer is None:
            return await flight()
        shared: tuple[bytes, int, Node] = await coalescer.run((b"split", key, tag), flight)
        return shared

    def _note_blocks(self, result: bytes) -> None:
        """Block hashes of the logs served: EIP-1898 reads by hash are placed by number."""
        if len(result) <= 2:
            return
        eligibility = self.pool.eligibility
        last = None
        for log in orjson.loads(result):
            if type(log) is dict and log.get("blockHash") != last:
                last = log.get("blockHash")
                number = log.get("blockNumber")
                if type(number) is str and number.startswith("0x"):
                    eligibility.saw_block(last, int(number, 16))


async def _gather(chunks: list[Coroutine[Any, Any, list[bytes]]]) -> list[bytes]:
    """Every chunk's parts in order; the first failure cancels the rest and is raised as is."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(chunk) for chunk in chunks]
    except BaseExceptionGroup as failed:
        first: BaseException = failed
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [part for task in tasks for part in task.result()]
