"""Where a checked transaction goes: targets (nodes or private endpoints) and the fan-out.

``fan_out`` sends the same bytes to every target at once and answers with
the first acceptance; the other sends go on in the background (a
transaction should reach every node that will take it), and ``settled``
resolves once all have answered, for the transaction log. How an answer
is judged (``judge``):

- a ``result`` is acceptance;
- "already known" / "known transaction" (geth, BSC, Hardhat's "Known
  transaction"), "already exists" / "already imported" (Erigon,
  Nethermind) are acceptance: the node has it;
- "nonce too low" is acceptance only once a node returns the transaction
  by hash (the caller asks, ``nonce_low``): the same nonce may have been
  used by a different transaction;
- any other JSON-RPC error is a rejection in the node's own words;
- no answer (timeout, refused connection, HTTP 5xx) is a failure.

A transaction is answered as failed only when no target accepted it, so
never while any node took it. Retries send the same bytes, never another
transaction (the body is built once).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.upstream.pool import UpstreamError


@dataclass(frozen=True, slots=True)
class Message:
    """What one call sends, built once: every target gets the same transactions.

    ``method`` / ``params``: the call as checked and rebuilt (``tx.checks``);
    ``body``: that call as a JSON-RPC request, the bytes a node (or a plain
    builder) gets; ``raws``: the raw transactions it carries, for a builder
    whose dialect words them otherwise (``tx.dialects``); ``options``: the
    key's bundle options for those dialects.
    """

    method: str
    params: list[Any]
    body: bytes
    raws: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    gid: int = 1  # the request id of ``body``, reused by a dialect's own request


Send = Callable[[Message], Awaitable[bytes]]

_KNOWN = (
    "already known",
    "known transaction",
    "already exists",
    "already imported",
    "alreadyknown",
)
_NONCE_LOW = ("nonce too low",)


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    NONCE_LOW = "nonce_low"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Target:
    """One place a transaction can go: a node (its name) or a private endpoint (its display)."""

    name: str
    send: Send


@dataclass(slots=True)
class Result:
    """What one target made of the transaction."""

    target: str
    verdict: Verdict
    error: dict[str, Any] | None = None  # the JSON-RPC error of a rejection
    timeout: bool = False
    answer: Any = None  # the result member of an acceptance


def judge(target: str, payload: bytes) -> Result:
    """A target's answer to one call (``eth_sendRawTransaction`` or ``eth_sendBundle``)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return Result(target, Verdict.FAILED)
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, dict):
        return Result(target, Verdict.FAILED)
    error = obj.get("error")
    if error is None and "result" in obj:
        return Result(target, Verdict.ACCEPTED, answer=obj["result"])
    if not isinstance(error, dict):
        return Result(target, Verdict.FAILED)
    message = str(error.get("message", "")).lower()
    if any(word in message for word in _KNOWN):
        return Result(target, Verdict.ACCEPTED)
    if any(word in message for word in _NONCE_LOW):
        return Result(target, Verdict.NONCE_LOW, error=error)
    return Result(target, Verdict.REJECTED, error=error)


async def _one(target: Target, message: Message) -> Result:
    try:
        payload = await target.send(message)
    except UpstreamError as exc:
        return Result(target.name, Verdict.FAILED, timeout=exc.timeout)
    except TimeoutError:
        return Result(target.name, Verdict.FAILED, timeout=True)
    except Exception:  # an endpoint's connection error: that target failed, not the call
        return Result(target.name, Verdict.FAILED)
    return judge(target.name, payload)


@dataclass(slots=True)
class Fanned:
    """The fan-out's answer so far: the first acceptance, or every result when none came."""

    first: Result | None
    results: list[Result]
    settled: asyncio.Future[list[Result]] = field(repr=False)


class FanOut:
    """Runs fan-outs; holds the background sends so none is garbage-collected mid-flight."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    async def fan_out(self, targets: Sequence[Target], message: Message) -> Fanned:
        """Send ``message`` to every target at once; return at the first acceptance or when
        all end."""
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[list[Result]] = loop.create_future()
        results: list[Result] = []
        first: asyncio.Future[Result | None] = loop.create_future()
        pending = len(targets)
        if not pending:
            settled.set_result([])
            return Fanned(None, [], settled)

        def done(task: asyncio.Task[Result]) -> None:
            nonlocal pending
            self._running.discard(task)
            pending -= 1
            if not task.cancelled() and task.exception() is None:
                res = task.result()
                results.append(res)
                if res.verdict is Verdict.ACCEPTED and not first.done():
                    first.set_result(res)
            if pending == 0:
                if not first.done():
                    first.set_result(None)
                if not settled.done():
                    settled.set_result(list(results))

        for target in targets:
            task = asyncio.ensure_future(_one(target, message))
            self._running.add(task)
            task.add_done_callback(done)
        winner = await asyncio.shield(first)
        return Fanned(winner, list(results), settled)

    async def close(self) -> None:
        """Let the sends in flight finish (each has its own timeout), then return."""
        if self._running:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._running, return_exceptions=True)
