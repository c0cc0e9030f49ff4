"""A mock node that speaks JSON-RPC over HTTP *and* WebSocket, for tests, demo and bench.

The HTTP-only ``gateway.demo.mocknode`` is a raw protocol built to cost nothing
under load; subscriptions need a WebSocket server, so this one is a small
aiohttp app instead: ``POST /`` answers calls, ``GET /`` with ``Upgrade``
opens a socket that also answers ``eth_subscribe`` / ``eth_unsubscribe``.
Several nodes may serve one ``Chain`` (the same blocks, as real nodes of one
network do), which is what failover tests need.

Switches: ``Chain.mine()`` (or a block timer, ``block_time_s``),
``Chain.reorg(depth)`` (replaces the newest blocks; logs of the orphaned ones
are sent again with ``removed: true``, as geth does), ``node.drop()`` (close
every socket now), ``node.down`` (refuse new sockets and HTTP calls),
``node.muted`` (keep sockets open but send no notifications: a stalled node),
``node.forge`` (rewrite each ``newHeads`` header: a hostile node).

It stays whole because the shared ``Chain`` (blocks, logs, re-orgs) and the
node that serves it are one mock: every switch a failover test flips reaches
both, and only tests, the demo and the bench import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import WSMsgType, web
from eth_hash.auto import keccak

from gateway.demo import wallet
from gateway.demo.blockclock import BlockClock
from gateway.demo.blockviews import (
    BSC_CHAINS,
    FINALITY_METHODS,
    TRANSFER_TOPIC,
    block_view,
    finalized_view,
    header_of,
    log_matches,
    transfer_logs,
)
from gateway.demo.nodewire import canned_block

__all__ = [
    "TRANSFER_TOPIC",
    "Chain",
    "MockWsNode",
    "header_of",
    "log_matches",
    "start_ws_node",
]

_PROPAGATION_S = 0.25  # a sent transaction reaches the next block's proposer in this long


@functools.lru_cache(maxsize=4096)
def _h(*parts: object) -> str:
    """A 32-byte hash standing for what ``parts`` name, Keccak as the chain's own hashes."""
    return "0x" + keccak(":".join(map(str, parts)).encode()).hex()


class Chain:
    """The blocks several mock nodes agree on; mining notifies every live node."""

    def __init__(
        self,
        chain_id: int = 56,
        *,
        start_block: int = 1_000_000,
        logs_per_block: int = 3,
        block_time_s: float = 0.0,
        stamp: bool = False,
        finality_depth: int = 0,
    ) -> None:
        self.chain_id = chain_id
        # How far the finalized (and safe) block trails the head: BSC's fast
        # finality settles a block about 1.1 s after it is made (two or three
        # blocks); 0 keeps every tag at the head, as tests of a bare chain expect.
        self.finality_depth = finality_depth
        # bench: newHeads carry "emittedAt" (time.time()) so a client in another
        # process measures node-emit-to-receive latency. Not a real node field.
        self.stamp = stamp
        self.head = start_block
        self.logs_per_block = logs_per_block
        self.block_time_s = block_time_s
        self.nodes: list[MockWsNode] = []
        self.emitted_at: dict[int, float] = {}  # block number -> time.time() of its newHeads
        self.ledger = wallet.Ledger(chain_id)  # transactions sent, shared by every node
        self._forks: dict[int, int] = {}
        self._timer: asyncio.Task[None] | None = None
        self._next_due = 0.0  # time.monotonic() the timer's next block is due
        self._clock: BlockClock | None = None  # the blocks' stamps, from start()

    def block_hash(self, number: int) -> str:
        return _h(self.chain_id, number, self._forks.get(number, 0))

    def block(self, number: int) -> dict[str, Any] | None:
        if number > self.head or number < 0:
            return None
        hashes = self.ledger.hashes_in(number)
        block = canned_block(number, self.block_hash(number), self.block_hash(number - 1), hashes)
        if self._clock is not None:  # on a clock: when it was due (the same on every call)
            block["timestamp"] = hex(int(self._clock.made_at(number)))
        return block

    def logs(self, number: int, *, removed: bool = False) -> list[dict[str, Any]]:
        fork = self._forks.get(number, 0)
        txs = [_h("tx", self.chain_id, number, fork, i) for i in range(self.logs_per_block)]
        return transfer_logs(number, self.block_hash(number), fork, txs, removed=removed)

    def get_logs(self, flt: dict[str, Any]) -> list[dict[str, Any]]:
        lo = self._tag(flt.get("fromBlock", "latest"))
        hi = min(self._tag(flt.get("toBlock", "latest")), self.head)
        if hi - lo > 10_000:
            raise ValueError("range too large")
        out: list[dict[str, Any]] = []
        for n in range(lo, hi + 1):
            out.extend(log for log in self.logs(n) if log_matches(log, flt))
        return out

    @property
    def finalized(self) -> int:
        return max(0, self.head - self.finality_depth)

    def _tag(self, tag: Any) -> int:
        if tag in ("safe", "finalized"):
            return self.finalized
        if tag in ("latest", "pending", None):
            return self.head
        if tag == "earliest":
            return 0
        if isinstance(tag, str) and tag.startswith("0x"):
            return int(tag, 16)
        raise ValueError("bad block tag")

    def mine(self, count: int = 1) -> None:
        """Add ``count`` blocks and notify every node's subscribers."""
        for _ in range(count):
            self.head += 1
            number = self.head
            self.emitted_at[number] = time.time()
            if len(self.emitted_at) > 4096:
                self.emitted_at.pop(next(iter(self.emitted_at)))
            self._announce(number)

    def reorg(self, depth: int) -> None:
        """Replace the newest ``depth`` blocks: removed logs first, then the new blocks."""
        first = self.head - depth + 1
        for number in range(first, self.head + 1):
            for node in self.nodes:
                node.publish_logs(self.logs(number, removed=True))
        for number in range(first, self.head + 1):
            self._forks[number] = self._forks.get(number, 0) + 1
        for number in range(first, self.head + 1):
            self._announce(number)

    def _announce(self, number: int) -> None:
        block = self.block(number)
        assert block is not None
        header = header_of(block)
        if self.stamp:
            header["emittedAt"] = time.time()
        logs = self.logs(number)
        pending = _h("pending", self.chain_id, number)
        for node in self.nodes:
            node.publish("newHeads", header)
            node.publish_logs(logs)
            node.publish("newPendingTransactions", pending)

    def next_block(self) -> int:
        """The block a transaction sent now goes in: the next one, or (on a timer) the one
        after when the next is due within ``_PROPAGATION_S``, as on BSC, where a
        transaction reaches the block's proposer in about that long. So no receipt
        comes sooner after its send than that (ethers' 250 ms cache meets it too)."""
        if self._timer is None or self._next_due - time.monotonic() >= _PROPAGATION_S:
            return self.head + 1
        return self.head + 2

    def include(self) -> None:
        """Mine a sent transaction's block now, unless the timer will (as BSC's does)."""
        if self._timer is None and self.ledger.hashes_in(self.head + 1):
            self.mine()

    def start(self) -> None:
        if self.block_time_s > 0 and self._timer is None:
            self._clock = clock = BlockClock(self.head, time.time(), self.block_time_s)
            self._timer = asyncio.create_task(self._tick(clock), name="mock-chain-blocks")

    async def _tick(self, clock: BlockClock) -> None:
        due = time.monotonic()
        while True:  # a steady rate: sleep to the next due time, not a fixed gap
            due += clock.block_time_s
            self._next_due = due
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            due = clock.settle(due, self.head + 1)  # a stall's slots skipped, not mined late
            self.mine()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None


@dataclass(slots=True)
class _Sub:
    kind: str
    flt: dict[str, Any]


class _Socket:
    __slots__ = ("subs", "ws")

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.subs: dict[str, _Sub] = {}


class MockWsNode:
    """One node of a ``Chain``: HTTP and WebSocket JSON-RPC on one URL."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self.down = False
        self.muted = False
        self.delay_s = 0.0  # HTTP answers wait this long (an in-flight call to drain)
        # A hostile node: rewrites each newHeads header it sends (a far-future
        # number, a hash its HTTP answers do not have); None = honest.
        self.forge: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        # Subscription kinds this node offers (real nodes often lack newPendingTransactions).
        self.offered = {"newHeads", "logs", "newPendingTransactions"}
        self.sockets: set[_Socket] = set()
        self.subscribe_calls = 0
        self.unsubscribe_calls = 0
        self.calls: list[str] = []  # methods asked, in order (tests read it)
        self.bodies: list[bytes] = []  # raw HTTP bodies received, last 100
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.ws_url = ""
        chain.nodes.append(self)

    @property
    def active_subscriptions(self) -> int:
        return sum(len(s.subs) for s in self.sockets)

    def subscriptions(self, kind: str) -> int:
        return sum(1 for s in self.sockets for sub in s.subs.values() if sub.kind == kind)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/", self._post)
        app.router.add_get("/", self._ws)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        self.ws_url = f"ws://{host}:{bound}"

    async def close(self) -> None:
        if self in self.chain.nodes:
            self.chain.nodes.remove(self)
        await self.drop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def drop(self) -> None:
        """Close every socket now (the gateway sees its node go away)."""
        for sock in list(self.sockets):
            await sock.ws.close(code=1001, message=b"node going away")
        self.sockets.clear()

    # -- pushing -------------------------------------------------------------
    def publish(self, kind: str, result: Any) -> None:
        if self.muted:
            return
        if kind == "newHeads" and self.forge is not None:
            result = self.forge(result)
        for sock in list(self.sockets):
            for sid, sub in sock.subs.items():
                if sub.kind == kind:
                    self._send(sock, sid, result)

    def publish_logs(self, logs: Iterable[dict[str, Any]]) -> None:
        if self.muted:
            return
        logs = list(logs)
        for sock in list(self.sockets):
            for sid, sub in sock.subs.items():
                if sub.kind == "logs":
                    for log in logs:
                        if log_matches(log, sub.flt):
                            self._send(sock, sid, log)

    def _send(self, sock: _Socket, sid: str, result: Any) -> None:
        msg = {
            "jsonrpc": "2.0",
            "method": "eth_subscription",
            "params": {"subscription": sid, "result": result},
        }
        if not sock.ws.closed:
            task = asyncio.ensure_future(sock.ws.send_frame(orjson.dumps(msg), WSMsgType.TEXT))
            task.add_done_callback(_quiet)

    # -- answering -----------------------------------------------------------
    async def _post(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503, text="down")
        body = await request.read()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.bodies.append(body)
        del self.bodies[:-100]
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32700}})
        if isinstance(msg, list):
            answers = [self._call(m, None) for m in msg]
            return web.Response(body=orjson.dumps(answers), content_type="application/json")
        return web.Response(
            body=orjson.dumps(self._call(msg, None)), content_type="application/json"
        )

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            return web.Response(status=503, text="down")
        ws = web.WebSocketResponse(heartbeat=None)
        await ws.prepare(request)
        sock = _Socket(ws)
        self.sockets.add(sock)
        try:
            async for frame in ws:
                if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    break
                try:
                    msg = orjson.loads(frame.data)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(msg, list):
                    out: Any = [self._call(m, sock) for m in msg]
                else:
                    out = self._call(msg, sock)
                await ws.send_frame(orjson.dumps(out), WSMsgType.TEXT)  # text, as geth
        finally:
            self.sockets.discard(sock)
        return ws

    def _call(self, msg: Any, sock: _Socket | None) -> dict[str, Any]:
        cid = msg.get("id") if isinstance(msg, dict) else None
        method = msg.get("method") if isinstance(msg, dict) else None
        params = msg.get("params") or [] if isinstance(msg, dict) else []
        self.calls.append(str(method))
        try:
            result = self._result(str(method), params, sock)
        except _NotOffered:
            error = {"code": -32601, "message": wallet.not_offered(str(method))}
            return {"jsonrpc": "2.0", "id": cid, "error": error}
        except wallet.NodeError as exc:
            error = {"code": exc.code, "message": str(exc)}
            return {"jsonrpc": "2.0", "id": cid, "error": error}
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            return {"jsonrpc": "2.0", "id": cid, "error": {"code": -32602, "message": str(exc)}}
        return {"jsonrpc": "2.0", "id": cid, "result": result}

    def _result(self, method: str, params: Any, sock: _Socket | None) -> Any:
        chain = self.chain
        if method == "eth_chainId":
            return hex(chain.chain_id)
        if method == "net_version":
            return str(chain.chain_id)
        if method == "eth_blockNumber":
            return hex(chain.head)
        if method == "eth_getBlockByNumber":
            return block_view(chain, chain._tag(params[0]), bool(params[1:2] and params[1]))
        if method in FINALITY_METHODS and chain.chain_id in BSC_CHAINS:
            return finalized_view(chain, method, params)
        if method == "eth_getLogs":
            return chain.get_logs(params[0] if params else {})
        if method == "eth_getBalance":
            return "0xde0b6b3a7640000"
        if method == "eth_call":
            return "0x" + "00" * 31 + "01"
        if method == "eth_subscribe" and sock is not None:
            kind = params[0]
            if kind not in self.offered:
                raise ValueError(f"no {kind!r} subscription")
            flt = params[1] if len(params) > 1 and isinstance(params[1], dict) else {}
            sid = "0x" + secrets.token_hex(16)
            sock.subs[sid] = _Sub(kind, flt)
            self.subscribe_calls += 1
            return sid
        if method == "eth_unsubscribe" and sock is not None:
            self.unsubscribe_calls += 1
            return sock.subs.pop(params[0], None) is not None
        if not wallet.offers(method):
            raise _NotOffered(method)
        # Like an automining dev chain: a sent transaction gets a block of its own.
        sending = method == "eth_sendRawTransaction"
        result = wallet.answer(
            method,
            params,
            ledger=chain.ledger,
            head=chain.head,
            block_hash=chain.block_hash,
            include_at=chain.next_block() if sending else None,
        )
        if sending:
            chain.include()
        return result


class _NotOffered(Exception):
    """A method this node does not answer (-32601)."""


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def start_ws_node(chain: Chain, host: str = "127.0.0.1", port: int = 0) -> MockWsNode:
    node = MockWsNode(chain)
    await node.start(host, port)
    return node


async def start_demo_nodes(block_time_s: float = 3.0) -> dict[str, MockWsNode]:
    """One HTTP+WebSocket node per network (chain 56 and 204), mining on a timer.

    For ``gateway serve --demo``: use each node's ``url`` as the network's
    upstream (ws_upstreams default to the same address); stop with
    ``await node.close(); await node.chain.stop()``.
    """
    nodes = {}
    for name, chain_id, start in (("bsc", 56, 40_000_000), ("opbnb", 204, 50_000_000)):
        chain = Chain(chain_id, start_block=start, block_time_s=block_time_s)
        nodes[name] = await start_ws_node(chain)
        chain.start()
    return nodes
