"""The call's spans, taken only when tracing is on (``Pipeline.tracer`` is not None).

Each function here is the traced twin of one step the pipeline runs as is
when tracing is off: the request (``run``), admission and the cache lookup.
The spans themselves are ``telemetry.tracer``'s; what this module adds is what
the gateway knows of a call: the network, the method(s), the HTTP status, how
it was served (cache hit or miss, the node names) and the JSON-RPC error code.
Never the key, the params or the answer's body.

A batch is one request span with one ``cache`` span for all its reads and
one ``node`` span per node call (a batch goes to a node as one call), not a
span per call: the request span names its methods and counts its calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.intel.head import NetworkHead
from gateway.limits.limiter import Decision
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R
from gateway.rpc.errors import reply_code
from gateway.rpc.localmethods import Caller
from gateway.rpc.reads import Plans, Reads
from gateway.rpc.served import CACHE_HEADER, NODE_HEADER

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from gateway.telemetry.tracer import Tracer

Steps = Callable[[bytes, Caller], Awaitable[R.Answer]]
_MAX_METHODS = 32  # a batch's distinct methods named on its span, at most


async def run(tracer: Tracer, steps: Steps, body: bytes, caller: Caller, network: str) -> R.Answer:
    """``steps(body, caller)`` (the pipeline's call) inside its request span."""
    attributes = {"rpc.system": "jsonrpc", "rpc_gateway.network": network}
    attributes["rpc_gateway.transport"] = caller.transport
    step = tracer.request(caller.trace, attributes)
    try:
        answer = await steps(body, caller)
        _describe(tracer, step.span, network, answer)
    except BaseException as exc:
        step.close(exc)
        raise
    step.close()
    return answer


def _describe(tracer: Tracer, span: Span, network: str, answer: R.Answer) -> None:
    span.update_name(f"{network} {answer.method}")
    span.set_attribute("rpc.method", answer.method)
    span.set_attribute("http.response.status_code", answer.status)
    headers = answer.headers
    if CACHE_HEADER in headers:
        span.set_attribute("rpc_gateway.cache", headers[CACHE_HEADER])
    if NODE_HEADER in headers:
        span.set_attribute("rpc_gateway.node", headers[NODE_HEADER])
    calls = answer.calls
    if calls:  # a batch
        span.set_attribute("rpc_gateway.batch_size", len(calls))
        methods = sorted({c.method for c in calls if c.error is None})
        span.set_attribute("rpc.methods", methods[:_MAX_METHODS])
        codes = sorted({code for c in calls if (code := rpc.call_code(c))})
        if codes:
            span.set_attribute("rpc.jsonrpc.error_codes", codes)
    elif answer.body and (answer.status >= 400 or answer.is_error or len(answer.body) <= 512):
        code = reply_code(answer.body)  # as request insight reads it: no large answer parsed
        if code:
            span.set_attribute("rpc.jsonrpc.error_code", code)
    if answer.status >= 500:
        tracer.fail(span, f"HTTP {answer.status}")


async def admission(tracer: Tracer, admit: Awaitable[Decision], units: int) -> Decision:
    """The limiter's decision inside the ``admission`` span."""
    step = tracer.step("admission", {"rpc_gateway.units": units})
    if step is None:
        return await admit
    try:
        decision = await admit
    except BaseException as exc:
        step.close(exc)
        raise
    step.span.set_attribute("rpc_gateway.admission", decision.status.name.lower())
    if decision.plan:
        step.span.set_attribute("rpc_gateway.plan", decision.plan)
    step.close()
    return decision


async def lookup(tracer: Tracer, reads: Reads, calls: list[rpc.Call], head: NetworkHead) -> Plans:
    """``Reads.lookup`` inside the ``cache`` span: how many reads it answered, how many not."""
    step = tracer.step("cache")
    if step is None:
        return await reads.lookup(calls, head)
    try:
        plans = await reads.lookup(calls, head)
    except BaseException as exc:
        step.close(exc)
        raise
    hits = sum(1 for c in calls if c.served == "hit")
    step.span.set_attribute("rpc_gateway.cache.hits", hits)
    step.span.set_attribute("rpc_gateway.cache.misses", len(plans))
    step.close()
    return plans
