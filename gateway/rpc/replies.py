"""What leaves the pipeline: an ``Answer`` (bytes, status, headers, or a relay).

No transport here: the HTTP adapter turns an ``Answer`` into a response
(adding CORS), the WebSocket adapter into frames (status only tells it
whether the key was refused). Every error answer is built by
``protocol.error_body`` / ``error_obj`` from the one catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.rpc import protocol as rpc
from gateway.rpc.localmethods import After
from gateway.rpc.relay import Relay


class ParsedRequest:
    """What the pipeline learned from a body: its calls, or why it has none."""

    __slots__ = ("calls", "error", "guarded", "headers", "is_batch", "plan", "status")

    def __init__(
        self,
        calls: list[rpc.Call],
        is_batch: bool,
        error: tuple[rpc.ErrorKind, str | None] | None = None,
    ) -> None:
        self.calls = calls
        self.is_batch = is_batch
        self.error = error
        self.plan = ""  # the key's plan, once admitted (its eth_getLogs range limit)
        self.guarded: int | None = None  # the range limit judged before admission
        self.status = 200  # a lone local call's refusal may set its own (localmethods.CallError)
        self.headers: dict[str, str] | None = None  # ... and headers to go with it


class Answer:
    """One request's answer. ``body`` is empty for 204 (only notifications).

    ``relay``: a large single answer to stream (the body is then empty);
    ``method``: the metrics label; ``not_offered``: the one method name the
    calls sent that is not offered (for the key's call log, never a label);
    ``key_id``: the key's id once admission knew it; ``known_key``: an
    existing key (its calls count in insight);
    ``is_error``: a node error inside a 200 (insight reads its code);
    ``calls``: a batch's calls (insight counts each one, as usage does).
    """

    __slots__ = (
        "body",
        "calls",
        "followups",
        "headers",
        "is_error",
        "key_id",
        "known_key",
        "method",
        "not_offered",
        "note",
        "relay",
        "status",
    )

    def __init__(
        self,
        body: bytes,
        status: int = 200,
        headers: dict[str, str] | None = None,
        relay: Relay | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers = headers if headers is not None else {}
        self.relay = relay
        self.method = "-"
        self.not_offered = ""
        self.note = ""  # the one call's note for the key's request log (rpc.Call.note)
        self.key_id = ""
        self.known_key = False
        self.is_error = False
        self.calls: Sequence[rpc.Call] = ()
        self.followups: Sequence[After] = ()

    def settle(self, sent: bool) -> None:
        """Run the local methods' follow-ups (once): the answer was written, or was not."""
        followups = self.followups
        if not followups:
            return
        self.followups = ()
        for fn in followups:
            fn(sent)


def error_answer(
    kind: rpc.ErrorKind, id_: Any = None, data: Any = None, headers: dict[str, str] | None = None
) -> Answer:
    """The one way an error leaves the pipeline: its body and HTTP status from the catalogue."""
    return Answer(rpc.error_body(kind, id_, data), kind.http_status, headers)


def request_error(
    kind: rpc.ErrorKind,
    req: ParsedRequest,
    headers: dict[str, str] | None = None,
    data: Any = None,
) -> Answer:
    """A request-level failure: one error per call of a batch, each with its id."""
    calls = req.calls
    if req.error is not None or not calls:
        return error_answer(kind, None, data, headers)
    if not req.is_batch:
        return error_answer(kind, calls[0].id, data, headers)
    for call in calls:
        call.code = kind.code
    items = [rpc.error_obj(kind, c.id, data) for c in calls]
    return Answer(orjson.dumps(items), kind.http_status, headers)


def refused_calls(req: ParsedRequest, headers: dict[str, str]) -> Answer:
    """A batch whose every call was refused by admission: each its own error, HTTP 429.

    The calls carry their refusals (``pipeline.refuse_calls``); a call that
    was invalid or not offered keeps its own error.
    """
    items = [rpc.call_error_obj(c) for c in req.calls if c.answered]
    return Answer(orjson.dumps(items), rpc.RATE_LIMITED.http_status, headers)


def local_answer(req: ParsedRequest, headers: dict[str, str]) -> Answer:
    """Answers made without a node: our errors, local methods, cached answers in a batch."""
    calls = req.calls
    if not req.is_batch and len(calls) == 1 and calls[0].local is not None:
        # a lone cached or local answer (only a call with an id gets one): its bytes as
        # they are, which is what dumping them as the one item's Fragment gives
        if req.headers:
            headers = {**headers, **req.headers}
        return Answer(calls[0].local, req.status, headers)
    items: list[Any] = [
        orjson.Fragment(c.local) if c.local is not None else rpc.call_error_obj(c)
        for c in calls
        if c.answered
    ]
    if not items:
        return Answer(b"", 204, headers)
    if req.is_batch:
        return Answer(orjson.dumps(items), 200, headers)
    if req.headers:
        headers = {**headers, **req.headers}
    return Answer(orjson.dumps(items[0]), req.status, headers)


def upstream_failed(kind: rpc.ErrorKind, req: ParsedRequest, headers: dict[str, str]) -> Answer:
    if not req.is_batch:
        return error_answer(kind, req.calls[0].id, None, headers)
    for call in req.calls:
        if call.local is None and call.error is None:
            call.code = kind.code
    items = [
        orjson.Fragment(c.local)
        if c.local is not None
        else rpc.call_error_obj(c)
        if c.error is not None
        else rpc.error_obj(kind, c.id)
        for c in req.calls
        if c.answered
    ]
    return Answer(orjson.dumps(items), kind.http_status, headers)


def not_offered(req: ParsedRequest) -> str:
    """The one method name, as sent, that a request's calls asked for and is not offered.

    For the key's call log, never a metrics label: what a client
    sends is unbounded. "" when the calls named none, or several.
    """
    names = {c.method for c in req.calls if c.error is rpc.METHOD_NOT_FOUND}
    return names.pop() if len(names) == 1 else ""
