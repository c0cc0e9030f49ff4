"""Admission refusals as answers: the -32005 of a request, or of each call of a batch.

A batch is admitted call by call (``Decision.calls``): the refused calls
take their places with ``error.data.reason`` and, where waiting helps,
``retry_after_ms``; a call that costs more than the plan's bucket can ever
hold says so and gets no ``Retry-After``, since no wait would let it pass.
"""

from __future__ import annotations

from typing import Any

from gateway.limits.limiter import Decision, Status
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R

# The error a refused admission answers with; the WebSocket upgrade uses it too.
REFUSED_ERROR: dict[Status, rpc.ErrorKind] = {
    Status.UNAUTHORIZED: rpc.UNAUTHORIZED,
    Status.FORBIDDEN: rpc.FORBIDDEN,
    Status.RATE_LIMITED: rpc.RATE_LIMITED,
    Status.QUOTA_EXCEEDED: rpc.RATE_LIMITED,
    Status.TOO_EXPENSIVE: rpc.RATE_LIMITED,
    Status.KEY_RATE_CAPPED: rpc.RATE_LIMITED,
    Status.KEY_DAILY_CAPPED: rpc.RATE_LIMITED,
}
_ECHO = 200  # an Origin or address is echoed cut to this many characters

# error.data.reason of a 429: it names the limit that was reached, so a key
# holder can tell the owner's own key caps (Infura-style "key limits") from
# the plan's, and a refused call in a batch says why it was left out.
_REFUSAL_REASON = {
    Status.RATE_LIMITED: "the plan's rate reached",
    Status.QUOTA_EXCEEDED: "daily quota reached",
    Status.KEY_RATE_CAPPED: "the key's own requests-per-second cap reached (set by its owner)",
    Status.KEY_DAILY_CAPPED: "the key's own daily compute-unit cap reached (set by its owner)",
}


def refusal_reason(status: Status, burst: int) -> str:
    """``error.data.reason`` of a refused call (the plain bucket's too, inside a batch)."""
    if status is Status.TOO_EXPENSIVE:
        return (
            f"the call costs more compute units than the plan's bucket holds ({burst}): "
            "it can never pass on this plan"
        )
    return _REFUSAL_REASON[status]


def refuse_calls(req: R.ParsedRequest, decision: Decision) -> None:
    """Mark the calls a batch's admission refused (``Decision.calls``) as -32005.

    Each refused call takes its place in the answer with ``error.data.reason``
    (and ``retry_after_ms`` where waiting helps); the admitted ones go on.
    """
    mask = iter(decision.calls)
    retry_ms = max(1, decision.retry_ms)
    for call in req.calls:
        if call.error is not None:
            continue
        status = Status(int(next(mask)))
        if status is Status.ADMITTED:
            continue
        call.error = rpc.RATE_LIMITED
        call.reason = {"reason": refusal_reason(status, decision.limit)}
        if status is not Status.TOO_EXPENSIVE:
            call.reason["retry_after_ms"] = retry_ms


def denied_reason(denied: str, origin: str, ip: str) -> str:
    """The 403's reason: which of the key's allowlists refused (``Decision.denied``).

    Only a key that exists gets here (an unknown one is a bare 401), and what
    is named is the caller's own Origin, address or method.
    """
    if denied == "origin":
        if not origin:
            return "this key allows only listed origins, and the request sent no Origin"
        return f"this key does not allow origin {origin[:_ECHO]}"
    if denied == "ip":
        return f"this key does not allow IP {ip[:_ECHO]}" if ip else "the client's IP is unknown"
    if denied.startswith("method:"):
        return f"this key does not allow method {denied[7:][: rpc.MAX_METHOD_NAME]}"
    return "this key's allowlists do not allow this request"


def refused_answer(
    decision: Decision,
    req: R.ParsedRequest,
    headers: dict[str, str],
    origin: str = "",
    ip: str = "",
) -> R.Answer:
    """The answer to a request admission refused whole; ``headers``: its RateLimit ones;
    ``origin`` and ``ip``: the caller's, for the reason of an allowlist's refusal."""
    kind = REFUSED_ERROR[decision.status]
    if kind is rpc.FORBIDDEN:
        return R.request_error(kind, req, None, denied_reason(decision.denied, origin, ip))
    if kind is not rpc.RATE_LIMITED:
        return R.request_error(kind, req)
    if decision.calls:  # a batch: each call its own refusal (refuse_calls)
        if any(s != "5" for s in decision.calls):
            headers["Retry-After"] = str(-(-max(1, decision.retry_ms) // 1000))
        return R.refused_calls(req, headers)
    if decision.status is Status.TOO_EXPENSIVE:  # it can never pass: no Retry-After
        data: dict[str, Any] = {"reason": refusal_reason(decision.status, decision.limit)}
        return R.request_error(kind, req, headers, data)
    retry_ms = max(1, decision.retry_ms)
    headers["Retry-After"] = str(-(-retry_ms // 1000))
    data = {"retry_after_ms": retry_ms}
    reason = _REFUSAL_REASON.get(decision.status)
    if reason is not None:
        data["reason"] = reason
    return R.request_error(kind, req, headers, data)
