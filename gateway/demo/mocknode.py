"""A lean mock blockchain JSON-RPC node for tests, demos and benchmarks.

The node is a raw ``asyncio.Protocol`` HTTP/1.1 server rather than an aiohttp
app because it sits behind the gateway in every load test: it has to cost far
less CPU per call than the thing being measured, or the benchmark measures the
mock.  It speaks just enough HTTP/1.1 for real clients (keep-alive,
``Content-Length`` and chunked bodies, pipelining, ``Connection: close``),
framed by llhttp through ``demo/framing.py`` (shared with the bench client), and
answers a fixed set of Ethereum JSON-RPC methods with canned, deterministic
data.

Fault injection (latency, HTTP 500, HTTP 429, dropped connections, a node that
is down, a lagging head) is driven by :class:`MockNodeOptions`, which tests
swap at runtime with :func:`dataclasses.replace` to script failures.

Request ids are echoed exactly: numbers of any size keep their literal bytes
(orjson refuses integers beyond 64 bits, so such bodies are re-read with the
stdlib parser, keeping every number as an :class:`orjson.Fragment`); strings
come back as equal JSON strings.

It stays whole because it is one piece of test scaffolding with one entry point
(``start_mock_node``): its fault options, Go-style request decoding, canned
answers and raw protocol change together whenever a test needs a new fault, and
only tests, the demo and the bench import it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import random
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import orjson
from eth_hash.auto import keccak

from gateway.demo import wallet
from gateway.demo.framing import RequestFramer
from gateway.demo.nodeoptions import LatencyDist, MockNodeOptions
from gateway.demo.nodewire import (
    canned_block,
    error_obj,
    go_decode,
    http_answer,
    js_id,
    loads,
    loads_exact,
)

__all__ = [
    "LatencyDist",
    "MockNode",
    "MockNodeOptions",
    "go_decode",
    "start_mock_node",
]  # go_decode: nodewire's

_MAX_HEAD: Final = 64 * 1024
_MAX_BODY: Final = 16 * 1024 * 1024


# The id of the gateway's chain check in its health probe (gateway/upstream/health.py
# CHAIN_CHECK_ID): tests count eth_chainId as a client call, so it is not counted.
GATEWAY_CHAIN_CHECK: Final = "gateway-chain-check"
_PROBE_MARK: Final = b'"' + GATEWAY_CHAIN_CHECK.encode() + b'"'


class _Reparse(Exception):
    """A float id was read by orjson; re-read with the literal-keeping parser."""


@functools.lru_cache(maxsize=4096)
def _hash32(*parts: object) -> str:
    """A block hash, Keccak as a real chain's; cached, as the head's is asked again and again."""
    return "0x" + keccak(":".join(map(str, parts)).encode()).hex()


def _first_param(params: Any) -> Any:
    if not isinstance(params, list) or not params:
        raise ValueError("missing params")
    return params[0]


_Handler = Callable[["MockNode", Any], Any]


def _block_by_number(node: MockNode, params: Any) -> Any:
    tag = _first_param(params)
    head = node.head
    if tag in ("latest", "pending", "safe", "finalized"):
        number = head
    elif tag == "earliest":
        number = 0
    elif isinstance(tag, str) and tag.startswith("0x"):
        number = int(tag, 16)
    else:
        raise ValueError("bad block tag")
    if number > head:
        return None  # real nodes answer null for a block they do not have yet
    chain = node.options.chain_id
    hashes = node.ledger.hashes_in(number)
    return canned_block(number, _hash32(chain, number), _hash32(chain, number - 1), hashes)


_METHODS: Final[dict[str, _Handler]] = {
    "eth_chainId": lambda n, p: hex(n.options.chain_id),
    "net_version": lambda n, p: str(n.options.chain_id),
    "eth_blockNumber": lambda n, p: hex(n.head),
    "eth_getBalance": lambda n, p: "0xde0b6b3a7640000",  # 1 BNB
    "eth_call": lambda n, p: "0x" + "00" * 31 + "01",
    "eth_gasPrice": lambda n, p: "0x3b9aca00",  # 1 gwei
    "eth_getBlockByNumber": _block_by_number,
    "eth_getLogs": lambda n, p: [],
}
# Everything else a wallet or dapp library asks (nonce, fees, estimate, sending
# and receipts, client version) comes from gateway.demo.wallet.


class _Conn(asyncio.Protocol):
    """One client connection: parses requests, queues answers in order.

    Answers due later (latency) sit in ``_pending`` with a timer each; every
    timer pops the front entry, and due times never decrease, so pipelined
    answers leave in request order even when timers share a deadline.
    """

    def __init__(self, node: MockNode) -> None:
        self._node = node
        self._transport: asyncio.Transport | None = None
        self._framer = RequestFramer(_MAX_HEAD, _MAX_BODY)
        self._pending: collections.deque[tuple[asyncio.TimerHandle, bytes | None, bool]] = (
            collections.deque()
        )
        self._last_due = 0.0
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self._node.down:
            self._transport.abort()
            return
        self._node._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._node._conns.discard(self)
        for timer, _, _ in self._pending:
            timer.cancel()
        self._pending.clear()
        self._transport = None

    def abort(self) -> None:
        """Drop the connection with no answer (node down or drop fault)."""
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._node.down:
            self.abort()
            return
        framer = self._framer
        for request in framer.feed(data):
            if self._closing:
                return
            self._respond(*request)
        error = framer.error
        if error is not None and not self._closing:
            body = orjson.dumps(error_obj(None, -32600, "Invalid Request"))
            self._emit(http_answer(error.status, body, close=True), 0.0, close=True)
            self._closing = True

    def _respond(self, method: bytes, body: bytes, keep_alive: bool) -> None:
        node = self._node
        node.requests += 1
        opts = node.options
        close = not keep_alive
        if method != b"POST":
            reply = orjson.dumps(error_obj(None, -32600, "Invalid Request"))
            self._emit(
                http_answer(405, reply, close=close, extra=b"Allow: POST\r\n"), node._delay(), close
            )
        elif opts.spare_probes and _PROBE_MARK in body:
            status, reply = node._answer(body)
            self._emit(http_answer(status, reply, close=close), 0.0, close)
        else:
            roll = node._rng.random() if opts.drop_rate or opts.error_rate or opts.rate_429 else 1.0
            if roll < opts.drop_rate:
                node._count_calls(body)
                self._emit(None, node._delay(), True)
            elif roll < opts.drop_rate + opts.error_rate:
                status, reply = 500, node._fault_body(body, -32603, "Internal error")
                self._emit(http_answer(status, reply, close=close), node._delay(), close)
            elif roll < opts.drop_rate + opts.error_rate + opts.rate_429:
                status, reply = 429, node._fault_body(body, -32005, "Rate limit exceeded")
                extra = b"Retry-After: 1\r\n"
                self._emit(
                    http_answer(status, reply, close=close, extra=extra), node._delay(), close
                )
            elif opts.raw_answer is not None:
                node._count_calls(body)
                self._emit(http_answer(200, opts.raw_answer, close=close), node._delay(), close)
            else:
                status, reply = node._answer(body)
                self._emit(http_answer(status, reply, close=close), node._delay(), close)
        if close:
            self._closing = True

    def _emit(self, data: bytes | None, delay: float, close: bool) -> None:
        """Send now, or queue behind earlier answers; ``None`` means drop."""
        if delay <= 0 and not self._pending:
            self._deliver(data, close)
            return
        loop = asyncio.get_running_loop()
        due = max(loop.time() + delay, self._last_due)
        self._last_due = due
        timer = loop.call_at(due, self._fire)
        self._pending.append((timer, data, close))

    def _fire(self) -> None:
        if self._pending:
            _, data, close = self._pending.popleft()
            self._deliver(data, close)

    def _deliver(self, data: bytes | None, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if data is None or self._node.down:
            self.abort()
            return
        transport.write(data)
        if close:
            transport.close()


class MockNode:
    """A running mock node; the public attributes are for tests to read and poke.

    ``options`` may be replaced at any time (it is read per request);
    ``down = True`` aborts every open connection and refuses new ones.
    """

    options: MockNodeOptions

    def __init__(self, options: MockNodeOptions) -> None:
        self.options = options
        self.requests = 0
        self.calls = 0
        self.by_method: collections.Counter[str] = collections.Counter()
        # (method, params) of every call as the node understood it (decode="go" only)
        self.received: list[tuple[Any, Any]] = []
        self.bodies: list[bytes] = []  # every request body (decode="go" only)
        self.port = 0
        self.url = ""
        self._down = False
        self._offset = 0
        self._t0 = time.monotonic()
        self._rng = random.Random(options.seed)
        self._conns: set[_Conn] = set()
        self._server: asyncio.Server | None = None
        self.ledger = wallet.Ledger(options.chain_id)  # transactions sent to this node

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            for conn in list(self._conns):
                conn.abort()

    @property
    def head(self) -> int:
        """Current block: start_block + whole block times elapsed + offset."""
        opts = self.options
        ticks = int((time.monotonic() - self._t0) / opts.block_time_s) if opts.block_time_s else 0
        return opts.start_block + ticks + self._offset

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def set_head_offset(self, blocks: int) -> None:
        """Set (not add to) the head shift; negative makes a lagging node."""
        self._offset = blocks

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        await asyncio.sleep(0)  # let aborted transports run connection_lost

    def _delay(self) -> float:
        opts = self.options
        ms = opts.latency_ms
        if opts.latency_jitter_ms:
            if opts.latency_dist == "exponential":
                ms += self._rng.expovariate(1.0 / opts.latency_jitter_ms)
            else:
                ms += self._rng.uniform(0.0, opts.latency_jitter_ms)
        return ms / 1000.0

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        """The JSON-RPC answer to one HTTP body: (HTTP status, reply bytes)."""
        try:
            if self.options.decode == "go":
                self.bodies.append(body)
                return self._answer_parsed(go_decode(body))
            if self.options.ids == "js":
                return self._answer_parsed(orjson.loads(body), floats_ok=True)
            try:
                return self._answer_parsed(loads(body))
            except _Reparse:
                return self._answer_parsed(loads_exact(body))
        except (ValueError, RecursionError):
            return 200, orjson.dumps(error_obj(None, -32700, "Parse error"))

    def _answer_parsed(self, msg: Any, floats_ok: bool = False) -> tuple[int, bytes]:
        calls = msg if isinstance(msg, list) else [msg]
        if not floats_ok and any(isinstance(c, dict) and type(c.get("id")) is float for c in calls):
            raise _Reparse  # before counting, so a re-read does not count twice
        if isinstance(msg, list):
            if not msg:
                return 200, orjson.dumps(error_obj(None, -32600, "Invalid Request"))
            replies = [r for r in map(self._call, msg) if r is not None]
        else:
            one = self._call(msg)
            replies = [] if one is None else [one]
        if not replies:
            return 204, b""
        return 200, orjson.dumps(replies if isinstance(msg, list) else replies[0])

    def _call(self, call: Any) -> dict[str, Any] | None:
        if not isinstance(call, dict):
            return error_obj(None, -32600, "Invalid Request")
        cid = call.get("id")
        method = call.get("method")
        opts = self.options
        if opts.decode == "go":
            self.received.append((method, call.get("params")))
        if opts.ids == "js":
            cid = js_id(cid)
        elif opts.ids == "refuse_null" and "id" in call and cid is None:
            return error_obj(None, -32600, "Invalid Request: id must not be null")
        if not isinstance(method, str) or call.get("jsonrpc") != "2.0":
            return error_obj(cid, -32600, "Invalid Request")
        if cid != GATEWAY_CHAIN_CHECK:  # the gateway's probe, not a call to count
            self.calls += 1
            self.by_method[method] += 1
        if "id" not in call:
            return None
        return self._valid_call(cid, method, call.get("params"))

    def _valid_call(self, cid: Any, method: str, params: Any) -> dict[str, Any]:
        """The answer to a valid call that was counted (``ChainNode`` answers from its chain)."""
        handler = _METHODS.get(method)
        if handler is None:
            return self._wallet_call(cid, method, params)
        try:
            result = handler(self, params)
        except (TypeError, ValueError, IndexError, KeyError):
            return error_obj(cid, -32602, "Invalid params")
        if self.options.result_bytes > 0 and method in ("eth_call", "eth_getLogs"):
            result = "0x" + "ab" * (self.options.result_bytes // 2)
        return {"jsonrpc": "2.0", "id": cid, "result": result}

    def _wallet_call(self, cid: Any, method: str, params: Any) -> dict[str, Any]:
        if not wallet.offers(method):
            return error_obj(cid, -32601, wallet.not_offered(method))
        chain = self.options.chain_id
        try:
            result = wallet.answer(
                method,
                params if isinstance(params, list) else [],
                ledger=self.ledger,
                head=self.head,
                block_hash=lambda n: _hash32(chain, n),
            )
        except wallet.NodeError as exc:
            return error_obj(cid, exc.code, str(exc))
        except (TypeError, ValueError, IndexError, KeyError):
            return error_obj(cid, -32602, "Invalid params")
        return {"jsonrpc": "2.0", "id": cid, "result": result}

    def _fault_body(self, body: bytes, code: int, message: str) -> bytes:
        """Error body for an injected fault, one error per call id."""
        msg = self._count_calls(body)
        if isinstance(msg, list) and msg:
            ids = [c.get("id") for c in msg if isinstance(c, dict) and "id" in c]
            return orjson.dumps(
                [error_obj(i, code, message) for i in ids] or error_obj(None, code, message)
            )
        cid = msg.get("id") if isinstance(msg, dict) else None
        return orjson.dumps(error_obj(cid, code, message))

    def _count_calls(self, body: bytes) -> Any:
        """Count the calls of a faulted request (the node did receive them)."""
        try:
            msg = loads(body)
        except ValueError:
            return None
        for call in msg if isinstance(msg, list) else [msg]:
            if isinstance(call, dict) and isinstance(call.get("method"), str):
                self.calls += 1
                self.by_method[call["method"]] += 1
        return msg


_N = TypeVar("_N", bound=MockNode)


async def start_mock_node(
    options: MockNodeOptions | None = None, host: str = "127.0.0.1", port: int = 0
) -> MockNode:
    """Start a mock node listening on ``host:port`` (0 picks a free port)."""
    return await listen(MockNode(options or MockNodeOptions()), host, port)


async def listen(node: _N, host: str, port: int) -> _N:
    """Serve ``node`` on ``host:port`` (0 picks a free port); its ``port`` and ``url`` say where."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(node), host, port, backlog=1024)
    node._server = server
    node.port = server.sockets[0].getsockname()[1]
    node.url = f"http://{host}:{node.port}"
    return node
