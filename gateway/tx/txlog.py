"""The key's transaction log: each raw transaction's hash and where it went.

Entries are kept in memory and written once per interval in one pipeline
(the way request insight is), as a stream per key (``p:{H}:q:tx``, capped
at ``insight.log_cap`` entries, expiring ``insight.log_ttl_s`` after the
last). An entry holds the time, the method, the transaction hash, the
sender, the route (``public``, ``private``, ``private, then public``), who
accepted it (node names or private endpoints, their URLs masked), the
outcome and, when nobody accepted it, the reason (a node's own words).
Never the raw bytes: they are the sender's business until mined.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from gateway.redis import keyspace as ks
from gateway.redis.flushing import flush_every

log = logging.getLogger("gateway.tx")

Entry = dict[str, str]


class TxLog:
    """Per-process buffer of transaction log entries; ``run`` flushes it."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        cap: int = 200,
        ttl_s: int = 7 * 86_400,
        interval_s: float = 1.0,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._cap = max(1, cap)
        self._ttl_ms = max(1, ttl_s) * 1000
        self._interval = interval_s
        self._pending: dict[str, deque[Entry]] = {}

    def add(
        self,
        khash: str,
        method: str,
        tx_hash: str,
        sender: str,
        route: str,
        accepted_by: list[str],
        outcome: str,
        reason: str = "",
    ) -> None:
        entries = self._pending.get(khash)
        if entries is None:
            if len(self._pending) >= 10_000:  # bounded like request insight's max_keys
                return
            entries = self._pending[khash] = deque(maxlen=self._cap)
        entries.append(
            {
                "time": str(int(time.time() * 1000)),
                "method": method,
                "hash": tx_hash,
                "sender": sender,
                "route": route,
                "accepted_by": ",".join(accepted_by),
                "outcome": outcome,
                "reason": reason,  # why it was not accepted ("" when it was)
            }
        )

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        pipe = self._redis.pipeline(transaction=False)
        for khash, entries in pending.items():
            key = ks.tx_log(self._prefix, khash)
            for entry in entries:
                pipe.xadd(key, entry, maxlen=self._cap, approximate=True)
            pipe.pexpire(key, self._ttl_ms)
        try:
            await pipe.execute()
        except Exception as exc:  # Redis down: the entries are dropped (a log, not a ledger)
            log.debug("transaction log not flushed: %s", exc)

    async def run(self) -> None:
        await flush_every(self._interval, self.flush)
