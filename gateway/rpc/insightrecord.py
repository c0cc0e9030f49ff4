"""One answered request into request insight: each call under its method and code.

Kept apart from the pipeline's steps because it runs after the answer is
written, from every transport (``Pipeline.record``), and reads only the
answer: a single call's code from its body (parsed only when it is small or
known to hold an error), a batch's calls each with the code its answer was
made with (``Call.code``, never parsed again), as usage counts them. No
I/O: ``CallInsight`` sums in memory.
"""

from __future__ import annotations

from gateway.rpc import protocol as rpc
from gateway.rpc.errors import reply_code
from gateway.rpc.localmethods import Caller
from gateway.rpc.replies import Answer
from gateway.rpc.sinks import CallInsight


def record_answer(
    insight: CallInsight, caller: Caller, answer: Answer, status: int, elapsed: float
) -> None:
    """Record ``answer`` of an existing key; the others (no key, unknown key) are not kept."""
    if not answer.known_key or caller.khash is None:
        return
    body = answer.body
    if answer.calls:  # a batch: each call under its own method and code, as usage counts
        _record_calls(insight, caller.khash, caller.ip, answer, status, elapsed)
        return
    code = 0
    if body and (status >= 400 or answer.is_error or len(body) <= 512):
        code = reply_code(body)
    failed = code != 0 or status >= 400
    insight.record(
        caller.khash,
        answer.method,
        code,
        status,
        elapsed * 1000,
        caller.ip if failed else "",
        answer.not_offered,
        answer.note,
    )


def _record_calls(
    insight: CallInsight, khash: str, ip: str, answer: Answer, status: int, elapsed: float
) -> None:
    """Each call under its method and the code its answer was made with (``rpc.call_code``)."""
    for call in answer.calls:
        code = rpc.call_code(call)
        failed = code != 0 or status >= 400
        insight.record(
            khash,
            call.method if call.error is None else "-",
            code,
            status,
            elapsed * 1000,
            ip if failed else "",
            call.method if call.error is rpc.METHOD_NOT_FOUND else "",
            call.note,
        )
