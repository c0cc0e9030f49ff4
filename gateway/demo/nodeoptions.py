"""What a mock node is told to do (``MockNodeOptions``): latency, injected faults,
canned answers, and how it decodes requests and echoes ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LatencyDist = Literal["uniform", "exponential"]


@dataclass(frozen=True)
class MockNodeOptions:
    """Behaviour of one mock node; frozen so a swap is one atomic assignment.

    Rates are fractions of HTTP requests and are drawn once per request, in
    the order drop, error, 429, so with a ``seed`` the same sequence of
    requests always meets the same faults.
    """

    chain_id: int = 56
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    latency_dist: LatencyDist = "uniform"  # "exponential": jitter is the mean
    error_rate: float = 0.0
    rate_429: float = 0.0
    drop_rate: float = 0.0
    block_time_s: float = 1.0
    start_block: int = 1_000_000
    seed: int | None = None
    # How the node reads a request: "exact" (strict, first parser wins), or
    # "go" as geth / BSC / op-geth do with encoding/json: keys matched
    # case-insensitively, the last one wins ("Method" overrides "method").
    decode: Literal["exact", "go"] = "exact"
    # What the node does with ids: "echo" them exactly; "js" reads them as
    # float64 and writes them back as JavaScript does (2**64 comes back as
    # 18446744073709552000); "refuse_null" answers -32600 to ``id: null``.
    ids: Literal["echo", "js", "refuse_null"] = "echo"
    # When set, every POST is answered 200 with exactly these bytes (a broken
    # node, a proxy's HTML page, an answer of hundreds of megabytes).
    raw_answer: bytes | None = None
    # When > 0, eth_call and eth_getLogs answer a hex string result of about
    # this many bytes (a 50 MB eth_getLogs, a hostile node).
    result_bytes: int = 0
    # When set, the gateway's own health probe (the batch holding the
    # ``GATEWAY_CHAIN_CHECK`` id) is answered at once, with no fault and no
    # latency: a test of what clients meet keeps its nodes in service and its
    # seeded fault sequence for the clients' calls alone.
    spare_probes: bool = False

    def __post_init__(self) -> None:
        rates = (self.error_rate, self.rate_429, self.drop_rate)
        if any(not 0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0:
            raise ValueError("error_rate, rate_429, drop_rate: each in [0, 1], sum <= 1")
        if self.latency_ms < 0 or self.latency_jitter_ms < 0 or self.block_time_s < 0:
            raise ValueError("latency_ms, latency_jitter_ms, block_time_s must be >= 0")
        if self.latency_dist not in ("uniform", "exponential"):
            raise ValueError(f"latency_dist: unknown distribution {self.latency_dist!r}")
        if self.decode not in ("exact", "go"):
            raise ValueError(f"decode: unknown mode {self.decode!r}")
        if self.ids not in ("echo", "js", "refuse_null"):
            raise ValueError(f"ids: unknown mode {self.ids!r}")
