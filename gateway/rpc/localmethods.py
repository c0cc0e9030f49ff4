"""Methods the gateway answers itself ("local methods"), by name and transport.

``eth_subscribe`` / ``eth_unsubscribe`` (WebSocket only) and the filter
methods (``gateway.filters``, both transports) are registered here at
start-up; the pipeline then treats them as offered on that transport,
admits them like any call (the plan's weight for the name), and calls the
handler instead of a node. A handler gets the validated call and a
``LocalContext`` and returns the call's ``result`` or raises ``CallError``
(a JSON-RPC error in the node's words, with the HTTP status a lone call
answers with), or returns ``ForwardAs`` to have a read forwarded in its
place. Work that must wait until the answer is on the wire (a subscription
may only start notifying after the client has read its id) goes in
``ctx.after``; the adapter runs it with ``sent=True`` once written, or
``sent=False`` when the answer never went out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.rpc.errors import ErrorKind, explain
from gateway.rpc.protocol import Call
from gateway.rpc.reads import Reads

HTTP: Final = "http"
WS: Final = "ws"
TRANSPORTS: Final = (HTTP, WS)


class CallError(Exception):
    """A local method's refusal: the JSON-RPC error object it answers with.

    ``kind``: the error's row (code, message, and the HTTP status when it is
    the request's only call over HTTP: a node read that failed is 502 / 504;
    a batch or a socket answers 200). A refusal in a node's or builder's own
    words gets a kind of its own (``CallError(code, message, ...)``); one of
    the gateway's own rows is raised with ``CallError.of(kind, ...)``.
    ``headers`` go with that status (a 429's ``Retry-After``).
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = ErrorKind(code, message, status, explained=False)  # said in full already
        self.data = data
        self.headers = headers

    @classmethod
    def of(
        cls, kind: ErrorKind, data: Any = None, headers: dict[str, str] | None = None
    ) -> CallError:
        """The refusal of one of the gateway's own rows (``rpc.errors``), reason and all."""
        message, data = explain(kind, data)
        return cls(kind.code, message, data, kind.http_status, headers)

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def message(self) -> str:
        return self.kind.message

    @property
    def status(self) -> int:
        return self.kind.http_status

    def obj(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


After = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class ForwardAs:
    """A local handler's answer "forward this read instead" (``eth_getFilterLogs``).

    The call is rewritten to ``method`` / ``params`` and goes on down the
    pipeline like a client's own read: cache, coalescing, routing by block,
    and the bounded relay of a large answer on every transport.
    It was admitted and is metered as the method the client named.
    """

    method: str
    params: list[Any]


@dataclass(slots=True)
class Caller:
    """Who sends a body: made once per HTTP request, once per WebSocket.

    ``khash`` is None for a missing or malformed key (answered 401);
    ``ip`` is the client address for insight, ``ip_bits`` its form for the
    allowlist check; ``session`` is the transport's own state (the socket),
    for local methods that need it.
    """

    khash: str | None
    origin: str = ""
    ip: str = ""
    ip_bits: str = ""
    transport: str = HTTP
    session: Any = None
    # The client's W3C trace-context headers, read only when tracing is on.
    trace: dict[str, str] | None = None


@dataclass(slots=True)
class LocalContext:
    """What a local handler may use: who calls, the key's plan, the network's reads.

    ``reads`` answers a read through the cache, coalescing and routing by
    block (``Reads.single``), as a forwarded call would be.
    """

    caller: Caller
    plan: str
    reads: Reads
    followups: list[After] = field(default_factory=list)

    def after(self, fn: After) -> None:
        """Run ``fn(sent)`` once the answer holding this call was written (or was not)."""
        self.followups.append(fn)


LocalHandler = Callable[[Call, LocalContext], Awaitable[Any]]


class LocalMethods:
    """One network's registry; the pipeline reads it per call (a dict lookup)."""

    def __init__(self) -> None:
        self._by_transport: dict[str, dict[str, LocalHandler]] = {t: {} for t in TRANSPORTS}
        self._names: dict[str, frozenset[str]] = {t: frozenset() for t in TRANSPORTS}
        self.version = 0  # bumped on every change; the pipeline rebuilds its method sets

    def add(self, name: str, handler: LocalHandler, transports: Iterable[str] = TRANSPORTS) -> None:
        for transport in transports:
            table = self._by_transport[transport]
            table[name] = handler
            self._names[transport] = frozenset(table)
        self.version += 1

    def names(self, transport: str) -> frozenset[str]:
        return self._names[transport]

    def get(self, name: str, transport: str) -> LocalHandler | None:
        return self._by_transport[transport].get(name)
