"""Run a request's local methods (``rpc.localmethods``) in place of forwarding them.

Each answered call gets its whole answer in ``call.local`` (the batch and
single-answer code then treat it like a cache hit); a local notification
runs and drops out of the request (it has no place in the answer). A
handler answering ``ForwardAs`` has its call rewritten to that read and
forwarded with the others. A lone
call's refusal sets the request's HTTP status (``CallError.status``).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.rpc.localmethods import After, Caller, CallError, ForwardAs, LocalContext, LocalMethods
from gateway.rpc.reads import Reads
from gateway.rpc.replies import ParsedRequest


async def run_locals(
    local: LocalMethods, reads: Reads, caller: Caller, req: ParsedRequest
) -> list[After]:
    """Answer the local calls of ``req``; the follow-ups their handlers asked for."""
    transport = caller.transport
    names = local.names(transport)
    if not names or not any(c.error is None and c.method in names for c in req.calls):
        return []
    ctx = LocalContext(caller, req.plan, reads)
    keep = []
    try:
        for call in req.calls:
            handler = local.get(call.method, transport) if call.error is None else None
            if handler is None:
                keep.append(call)
                continue
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": call.id}
            try:
                result = await handler(call, ctx)
                if isinstance(result, ForwardAs):  # a read the node answers, relayed
                    call.method, call.params = result.method, result.params
                    keep.append(call)
                    continue
                answer["result"] = result
            except CallError as exc:
                answer["error"] = exc.obj()
                call.code = exc.code
                if not req.is_batch:
                    req.status = exc.status
                    req.headers = exc.headers
            if call.has_id:
                call.local = orjson.dumps(answer)
                keep.append(call)
    except BaseException:
        for fn in ctx.followups:
            fn(False)
        raise
    req.calls = keep
    return ctx.followups
