"""Where the pipeline counts what it answered: rpc's side of the store's sinks.

The pipeline only adds to in-memory counters; the store's ``ErrorCounter`` and
``InsightSink`` hold them and write them to Redis in batches. These protocols
are all the pipeline knows of them, so rpc does not import the store (the store
imports nothing of rpc either: the key shape and address masks it shares with
rpc are ``gateway.identity``).
"""

from __future__ import annotations

from typing import Protocol


class ErrorCounts(Protocol):
    """Failed calls and error answers, per key (``store.errorcounts.ErrorCounter``)."""

    def add(self, khash: str, n: int = 1) -> None:
        """``n`` calls no node answered (unreachable, timed out, a broken answer)."""

    def answered(self, khash: str, n: int = 1) -> None:
        """``n`` calls a node answered with a JSON-RPC error: the call's outcome."""


class CallInsight(Protocol):
    """One answered call of an existing key (``store.insight.InsightSink``)."""

    def record(
        self,
        khash: str,
        method: str,
        code: int,
        http_status: int,
        latency_ms: float,
        client_ip: str,
        not_offered: str = "",
        note: str = "",
    ) -> None: ...
