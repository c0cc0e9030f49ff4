"""Traces of every call, as a real OTLP/HTTP collector receives them.

A small OTLP/HTTP receiver (an aiohttp server on port 0 taking ``POST
/v1/traces``, decoded with opentelemetry-proto's ``ExportTraceServiceRequest``)
plays the collector. The real app is served by the gateway's own runner (the
lean door, the default) against the test Redis and mock nodes, each behind a
small front that records the ``traceparent`` header of every request it gets.
Spans are read once the app has stopped: its shutdown sends every span left,
so nothing here waits for an export interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from gateway import typedefs as T
from gateway.demo.mocknode import MockNode
from gateway.plugin import PIPELINES
from gateway.redis.embedded import LOOPBACK
from tests.helpers.config import MakeConfig
from tests.helpers.served import Served, served
from tests.helpers.txs import sender_account, signed
from tests.helpers.waiting import eventually

ROOMY = {"free": {"rate": 1_000_000, "burst": 1_000_000}}
SERVER, CLIENT = 2, 3  # the protobuf's Span.SpanKind values
ERROR = 2  # Status.STATUS_CODE_ERROR
ADDRESS = "0x" + "ab" * 20
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
ROOT = Path(__file__).resolve().parents[2]
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attrs: dict[str, Any]
    error: bool
    message: str


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


class Receiver:
    """An OTLP/HTTP endpoint: every export's raw body and the spans in it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[Span] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, LOOPBACK, 0).start()
        self.url = f"http://{LOOPBACK}:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        self.bodies.append(raw)
        for resource in ExportTraceServiceRequest.FromString(raw).resource_spans:
            for scope in resource.scope_spans:
                for s in scope.spans:
                    self.spans.append(
                        Span(
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.name,
                            s.kind,
                            {a.key: _value(a.value) for a in s.attributes},
                            s.status.code == ERROR,
                            s.status.message,
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def requests(self) -> list[Span]:
        return [s for s in self.spans if s.kind == SERVER]

    def children(self, parent: Span) -> list[Span]:
        return [s for s in self.spans if s.parent_id == parent.span_id]


class FailFirst:
    """The first ``times`` calls of ``method``, whichever node gets them: answered HTTP 503,
    or with ``stall_s``, answered only after that long (a slow node)."""

    def __init__(self, method: str, times: int, stall_s: float = 0.0) -> None:
        self.method = method.encode()
        self.left = times
        self.stall_s = stall_s

    def take(self, body: bytes) -> bool:
        if self.left > 0 and self.method in body:
            self.left -= 1
            return True
        return False


class NodeFront:
    """A node's front on port 0: records each request's ``traceparent`` and body,
    answers with the mock node's own answer (or a 503 its ``FailFirst`` asks for)."""

    def __init__(self, node: MockNode, fail: FailFirst | None = None) -> None:
        self.node = node.url
        self.fail = fail
        self.seen: list[tuple[str | None, bytes]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closing = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._handle)
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, LOOPBACK, 0).start()
        self.port = self._runner.addresses[0][1]

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}{LOOPBACK}:{self.port}/"

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def calls(self, method: str) -> list[str | None]:
        """The ``traceparent`` of every request that held a ``method`` call."""
        return [tp for tp, body in self.seen if method.encode() in body]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((request.headers.get("traceparent"), body))
        if self.fail is not None and self.fail.take(body):
            if not self.fail.stall_s:
                return web.Response(status=503, text="busy")
            with contextlib.suppress(TimeoutError):  # a stall ends early when the front closes
                await asyncio.wait_for(self._closing.wait(), self.fail.stall_s)
        assert self._session is not None
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self.node, data=body, headers=headers) as resp:
            answer = await resp.read()
            return web.Response(body=answer, status=resp.status, content_type="application/json")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    await rec.start()
    yield rec
    await rec.close()


@asynccontextmanager
async def fronts(
    node: MockNode, n: int, fail: FailFirst | None = None
) -> AsyncIterator[list[NodeFront]]:
    made = [NodeFront(node, fail) for _ in range(n)]
    try:
        for front in made:
            await front.start()
        yield made
    finally:
        for front in made:
            await front.close()


@asynccontextmanager
async def gateway(
    make_config: MakeConfig,
    nodes: list[dict[str, Any]],
    tracing: dict[str, Any],
    door: str = "lean",
) -> AsyncIterator[Served]:
    """The app served with ``nodes`` as bsc's node table, its heads known."""
    cfg = make_config(
        {
            "server": {"metrics_listen": "", "door": door},
            "plans": ROOMY,
            "upstream": {"probe_interval_s": 60},
            "networks": {"bsc": {"upstreams": nodes}},
            "tracing": tracing,
        }
    )
    async with served(cfg) as gw:
        for pool in gw.app[T.POOLS].values():
            await pool.probe_once()  # in service, heads known: "latest" reads are cached
        yield gw


async def call(
    gw: Served, key: str, method: str, params: list[Any], headers: dict[str, str] | None = None
) -> Any:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    return await post(gw, key, body, headers)


async def post(gw: Served, key: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
    sent = {"Content-Type": "application/json", **(headers or {})}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gw.url}/bsc/{key}", data=body, headers=sent) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return orjson.loads(await resp.read())


def _parents(sent: list[str | None]) -> list[str]:
    """The spans a node's ``traceparent`` headers name as parent (version-trace-span), each
    checked to say "sampled"."""
    named = []
    for header in sent:
        assert header is not None
        parent, _, flags = header.rpartition("-")
        assert int(flags, 16) & 1, header
        named.append(parent)
    return named


def _named(span: Span) -> str:
    return f"00-{span.trace_id}-{span.span_id}"


# -- one call, its steps -------------------------------------------------------
async def test_a_call_is_a_request_span_with_admission_cache_and_node_spans(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            for _ in range(2):  # a miss, then a hit
                answer = await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
                assert "result" in answer, answer
        sent = alpha.calls("eth_getBalance")
    miss, hit = receiver.requests()  # one request span per call, and nothing else
    assert miss.name == "bsc eth_getBalance" and miss.parent_id == ""
    assert miss.attrs["rpc_gateway.network"] == "bsc"
    assert miss.attrs["rpc.method"] == "eth_getBalance"
    assert miss.attrs["http.response.status_code"] == 200
    assert (miss.attrs["rpc_gateway.cache"], miss.attrs["rpc_gateway.node"]) == ("miss", "alpha")
    steps = {s.name: s for s in receiver.children(miss)}
    assert sorted(steps) == ["admission", "cache", "node"]
    assert {s.trace_id for s in steps.values()} == {miss.trace_id}
    assert steps["admission"].attrs["rpc_gateway.admission"] == "admitted"
    assert steps["cache"].attrs["rpc_gateway.cache.misses"] == 1
    node = steps["node"]
    assert node.kind == CLIENT and not node.error
    assert node.attrs["rpc_gateway.node"] == "alpha" and node.attrs["rpc_gateway.outcome"] == "ok"
    # the node got the trace, with the node call's span as parent
    assert _parents(sent) == [_named(node)]
    # the hit: answered from the cache, no node span
    assert hit.trace_id != miss.trace_id
    assert (hit.attrs["rpc_gateway.cache"], hit.attrs["rpc_gateway.node"]) == ("hit", "cache")
    steps = {s.name: s for s in receiver.children(hit)}
    assert sorted(steps) == ["admission", "cache"]
    assert steps["cache"].attrs["rpc_gateway.cache.hits"] == 1


@pytest.mark.parametrize("door", ["lean", "app"])
async def test_a_client_traceparent_is_continued_and_passed_to_the_node(
    make_config: MakeConfig,
    mock_nodes: dict[str, MockNode],
    receiver: Receiver,
    api_key: str,
    door: str,
) -> None:
    """Either door (server.door) reads the client's trace context."""
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}, door) as gw:
            header = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
            answer = await call(gw, api_key, "eth_getTransactionCount", [ADDRESS, "latest"], header)
            assert "result" in answer, answer
            # a traceparent that is not one starts a trace of its own; the call is answered
            junk = {"traceparent": "00-not-a-trace-01"}
            answer = await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"], junk)
            assert "result" in answer, answer
        sent = alpha.calls("eth_getTransactionCount")
    by_method = {s.attrs["rpc.method"]: s for s in receiver.requests()}
    continued, fresh = by_method["eth_getTransactionCount"], by_method["eth_getBalance"]
    assert (continued.trace_id, continued.parent_id) == (CLIENT_TRACE, CLIENT_SPAN)
    (node,) = [s for s in receiver.children(continued) if s.name == "node"]
    assert node.trace_id == CLIENT_TRACE
    assert _parents(sent) == [_named(node)]
    assert fresh.trace_id != CLIENT_TRACE and fresh.parent_id == ""


async def test_the_ratio_draws_every_call_whatever_a_client_flag_says(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    """By default a client's sampled flag decides nothing (any client could have every
    call traced): at ``sample_ratio = 0`` no call is, flag or not; at 1 a call whose
    client said "not sampled" is traced too, continuing the client's trace."""
    sampled = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    unsampled = {"traceparent": f"00-{'5' * 32}-{CLIENT_SPAN}-00"}
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        tracing = {"otlp_endpoint": receiver.url, "sample_ratio": 0.0}
        async with gateway(make_config, nodes, tracing) as gw:
            await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            await call(gw, api_key, "eth_getCode", [ADDRESS, "latest"], sampled)
        assert receiver.spans == []
        assert alpha.calls("eth_getCode") == [None]  # not traced: nothing to pass on
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            await call(gw, api_key, "eth_getTransactionCount", [ADDRESS, "latest"], unsampled)
        sent = alpha.calls("eth_getTransactionCount")
    (request,) = receiver.requests()
    assert (request.trace_id, request.parent_id) == ("5" * 32, CLIENT_SPAN)
    (node,) = [s for s in receiver.children(request) if s.name == "node"]
    assert _parents(sent) == [_named(node)]  # recorded, and so sampled for the node


async def test_following_client_sampling_draws_only_new_traces(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    """``follow_client_sampling``, ``sample_ratio = 0``: a call of its own is not traced
    (no span, no traceparent to the node); a client's sampled trace is; its unsampled one
    records nothing but still reaches the node with the client's trace id."""
    tracing = {"otlp_endpoint": receiver.url, "sample_ratio": 0.0, "follow_client_sampling": True}
    unsampled = "5" * 32
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, tracing) as gw:
            await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            sampled = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
            await call(gw, api_key, "eth_getCode", [ADDRESS, "latest"], sampled)
            dropped = {"traceparent": f"00-{unsampled}-{CLIENT_SPAN}-00"}
            await call(gw, api_key, "eth_getTransactionCount", [ADDRESS, "latest"], dropped)
        sent = {m: alpha.calls(m) for m in ("eth_getBalance", "eth_getCode")}
        dropped_sent = alpha.calls("eth_getTransactionCount")
    (request,) = receiver.requests()
    assert request.attrs["rpc.method"] == "eth_getCode" and request.trace_id == CLIENT_TRACE
    assert {s.trace_id for s in receiver.spans} == {CLIENT_TRACE}
    assert sent["eth_getBalance"] == [None]
    (node,) = [s for s in receiver.children(request) if s.name == "node"]
    assert _parents(sent["eth_getCode"]) == [_named(node)]
    (header,) = dropped_sent
    assert header is not None and header.startswith(f"00-{unsampled}-")
    assert int(header.rpartition("-")[2], 16) & 1 == 0  # not sampled, passed on as such


async def test_a_retry_is_a_second_node_span_each_node_named(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    """The first node answers 503, the call is retried on the other: two node spans."""
    async with fronts(mock_nodes["bsc"], 2, FailFirst("eth_getBalance", 1)) as (alpha, beta):
        nodes = [{"url": alpha.url(), "name": "alpha"}, {"url": beta.url(), "name": "beta"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            answer = await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            assert "result" in answer, answer
        sent = {"alpha": alpha.calls("eth_getBalance"), "beta": beta.calls("eth_getBalance")}
    (request,) = receiver.requests()
    attempts = sorted(
        (s for s in receiver.children(request) if s.name == "node"),
        key=lambda s: s.attrs["rpc_gateway.attempt"],
    )
    assert [s.attrs["rpc_gateway.attempt"] for s in attempts] == [0, 1]
    failed, answered = attempts
    assert failed.error and failed.attrs["rpc_gateway.outcome"] == "error"
    assert failed.message == f"{failed.attrs['rpc_gateway.node']}: HTTP 503"
    assert not answered.error and answered.attrs["rpc_gateway.outcome"] == "ok"
    assert {failed.attrs["rpc_gateway.node"], answered.attrs["rpc_gateway.node"]} == {
        "alpha",
        "beta",
    }
    assert request.attrs["rpc_gateway.node"] == answered.attrs["rpc_gateway.node"]
    for span in attempts:  # each node got its own attempt's span as parent
        assert _parents(sent[span.attrs["rpc_gateway.node"]]) == [_named(span)]


async def test_a_hedge_is_a_second_node_span_and_the_loser_is_cancelled(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    """The first node stalls past its hedge delay (at most hedge.ceiling_s): the other is
    asked too and answers; the stalled attempt's span ends cancelled."""
    stall = FailFirst("eth_getBalance", 1, stall_s=5.0)
    async with fronts(mock_nodes["bsc"], 2, stall) as (alpha, beta):
        nodes = [{"url": alpha.url(), "name": "alpha"}, {"url": beta.url(), "name": "beta"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            answer = await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            assert "result" in answer, answer
        sent = {"alpha": alpha.calls("eth_getBalance"), "beta": beta.calls("eth_getBalance")}
    (request,) = receiver.requests()
    first, hedge = sorted(
        (s for s in receiver.children(request) if s.name == "node"),
        key=lambda s: s.attrs["rpc_gateway.attempt"],
    )
    assert first.attrs["rpc_gateway.outcome"] == "cancelled" and not first.error
    assert hedge.attrs["rpc_gateway.outcome"] == "ok"
    assert hedge.attrs["rpc_gateway.attempt"] == 1
    assert {first.attrs["rpc_gateway.node"], hedge.attrs["rpc_gateway.node"]} == {"alpha", "beta"}
    for span in (first, hedge):
        assert _parents(sent[span.attrs["rpc_gateway.node"]]) == [_named(span)]


async def test_an_error_is_named_by_its_code_and_a_failed_call_marks_its_span(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    """A JSON-RPC error in a 200 is an attribute; a call no node answered (its one node
    failing every attempt) is an error span, and so is each attempt."""
    async with fronts(mock_nodes["bsc"], 1, FailFirst("eth_getBalance", 10)) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            answer = await call(gw, api_key, "no_suchMethod", [])
            assert answer["error"]["code"] == -32601, answer
            body = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "eth_getBalance",
                    "params": [ADDRESS, "latest"],
                }
            )
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"{gw.url}/bsc/{api_key}", data=body, headers=JSON) as resp,
            ):
                status = resp.status
    assert status >= 500
    by_method = {s.attrs["rpc.method"]: s for s in receiver.requests()}
    unknown, failed = by_method["-"], by_method["eth_getBalance"]
    assert unknown.attrs["rpc.jsonrpc.error_code"] == -32601 and not unknown.error
    assert failed.error and failed.message == f"HTTP {status}"
    assert failed.attrs["http.response.status_code"] == status
    attempts = [s for s in receiver.children(failed) if s.name == "node"]
    assert attempts and all(s.error for s in attempts)
    assert all(s.message == "alpha: HTTP 503" for s in attempts)


async def test_a_batch_is_one_request_span_with_one_node_call(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            batch = [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "eth_getBalance",
                    "params": [ADDRESS, "latest"],
                },
                {"jsonrpc": "2.0", "id": 2, "method": "eth_getCode", "params": [ADDRESS, "latest"]},
                {"jsonrpc": "2.0", "id": 3, "method": "no_suchMethod", "params": []},
            ]
            answers = await post(gw, api_key, orjson.dumps(batch))
            assert [("error" in a) for a in answers] == [False, False, True], answers
    (request,) = receiver.requests()
    assert request.name == "bsc batch"
    assert request.attrs["rpc_gateway.batch_size"] == 3
    assert request.attrs["rpc.methods"] == ["eth_getBalance", "eth_getCode"]
    assert request.attrs["rpc.jsonrpc.error_codes"] == [-32601]
    steps = sorted(s.name for s in receiver.children(request))
    assert steps == ["admission", "cache", "node"]


async def test_a_logs_split_has_a_split_span_and_a_span_per_chunk(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    node = mock_nodes["bsc"]
    async with fronts(node, 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha", "max_logs_range": 100}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            high = node.head - 51
            spec = {"fromBlock": hex(high - 249), "toBlock": hex(high), "address": ADDRESS}
            answer = await call(gw, api_key, "eth_getLogs", [spec])
            assert answer.get("result") == [], answer
    (request,) = receiver.requests()
    (split,) = [s for s in receiver.children(request) if s.name == "logs.split"]
    assert split.attrs["rpc_gateway.logs.blocks"] == 250
    assert split.attrs["rpc_gateway.logs.chunk_blocks"] == 100
    chunks = sorted(receiver.children(split), key=lambda s: s.attrs["rpc_gateway.logs.from"])
    assert {s.name for s in chunks} == {"logs.chunk"}
    bounds = [(s.attrs["rpc_gateway.logs.from"], s.attrs["rpc_gateway.logs.to"]) for s in chunks]
    assert bounds == [(high - 249, high - 150), (high - 149, high - 50), (high - 49, high)]
    for chunk in chunks:
        (call_span,) = receiver.children(chunk)
        assert call_span.name == "node" and call_span.attrs["rpc_gateway.node"] == "alpha"
    assert len(alpha.calls("eth_getLogs")) == 3


# -- what a span never holds ---------------------------------------------------
async def test_no_key_raw_transaction_or_node_credentials_in_any_span(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], receiver: Receiver, api_key: str
) -> None:
    raw = signed(sender_account(41))
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url("tracer:n0de-pa55word@"), "name": "alpha"}]
        async with gateway(make_config, nodes, {"otlp_endpoint": receiver.url}) as gw:
            await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            answer = await call(gw, api_key, "eth_sendRawTransaction", [raw])
            assert "result" in answer, answer
            await eventually(lambda: bool(alpha.calls(raw[2:])), 10, "the transaction at the node")
    methods = {s.attrs.get("rpc.method") for s in receiver.requests()}
    assert methods == {"eth_getBalance", "eth_sendRawTransaction"}
    assert any(s.name == "node" for s in receiver.spans)
    assert receiver.bodies
    exported = b"".join(receiver.bodies)
    for secret in (api_key, raw[2:], raw[-40:], "n0de-pa55word", f"{LOOPBACK}:{alpha.port}"):
        assert secret.encode() not in exported, secret
        assert secret.lower().encode() not in exported.lower(), secret


# -- off -----------------------------------------------------------------------
async def test_off_no_span_is_exported(
    make_config: MakeConfig,
    mock_nodes: dict[str, MockNode],
    receiver: Receiver,
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The standard variables alone (no ``tracing.otlp_endpoint``) turn nothing on."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url + "/v1/traces")
    async with fronts(mock_nodes["bsc"], 1) as (alpha,):
        nodes = [{"url": alpha.url(), "name": "alpha"}]
        async with gateway(make_config, nodes, {}) as gw:
            assert all(p.tracer is None for p in gw.app[PIPELINES].values())
            answer = await call(gw, api_key, "eth_getBalance", [ADDRESS, "latest"])
            assert "result" in answer, answer
        assert alpha.calls("eth_getBalance") == [None]  # no traceparent to the node either
    assert receiver.bodies == []  # a tracer's shutdown would have sent its spans by now


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
async def test_off_loads_no_tracing_code_and_starts_no_exporter(
    redis_url: str, prefix: str, mock_nodes: dict[str, MockNode], receiver: Receiver, on: bool
) -> None:
    """A served call in a process of its own. Off: no tracer, exporter or span processor
    is ever imported or started, so the call path cannot have used one. On (the same
    check, seeing them): the call's spans reach the collector."""
    endpoint = receiver.url if on else ""
    args = [redis_url, prefix, mock_nodes["bsc"].url, mock_nodes["opbnb"].url, endpoint]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.helpers.tracedcall", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=env,
            check=False,
        )

    done = await asyncio.to_thread(run)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    threads = [t for t in seen["threads"] if "Otel" in t]
    if on:
        assert "gateway.telemetry.tracer" in seen["loaded"] and threads, seen
        assert [s.attrs["rpc.method"] for s in receiver.requests()] == ["eth_getBalance"]
    else:
        assert seen["loaded"] == [] and threads == [], seen
        assert receiver.bodies == []
