"""One network's intelligence in one object: what NodePool and the handler hold.

``NetworkIntel.from_config`` builds the parts from ``[cache]``, ``[hedge]``,
``[upstream]`` and ``[limits]``; the pool owns it (``pool.intel``) and feeds
it heads and latencies, the handler asks it before forwarding. See
docs/INTEL_DESIGN.md for the call sites.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config import Config
from gateway.intel.cache import ResponseCache
from gateway.intel.coalesce import Coalescer
from gateway.intel.head import HeadReport, HeadTracker
from gateway.intel.hedge import Budget, HedgeStats, LatencyTracker
from gateway.intel.sharedcache import SharedCache


@dataclass(slots=True)
class NetworkIntel:
    heads: HeadTracker
    latency: LatencyTracker
    budget: Budget  # retries AND hedges draw from it (upstream.retry_budget)
    hedge_stats: HedgeStats
    hedging: bool
    cache: ResponseCache | None
    shared: SharedCache | None
    coalescer: Coalescer[Any] | None

    @classmethod
    def from_config(
        cls,
        cfg: Config,
        network: str,
        nodes: Sequence[str],
        *,
        redis: Any = None,
        clock: Callable[[], float] | None = None,
    ) -> NetworkIntel:
        """The parts for one network; ``nodes`` are the pool's node names."""
        c, h = cfg.cache, cfg.hedge
        heads = HeadTracker(nodes) if clock is None else HeadTracker(nodes, clock=clock)
        shared = None
        if c.enabled and c.redis and redis is not None:
            shared = SharedCache(
                redis,
                prefix=cfg.redis.prefix,
                network=network,
                ttl_s=c.redis_ttl_s,
                max_bytes=c.redis_max_bytes,
                max_entry_bytes=c.redis_max_entry_bytes,
            )
        return cls(
            heads=heads,
            latency=LatencyTracker(
                nodes,
                floor_s=h.floor_s,
                ceiling_s=h.ceiling_s,
                window=h.window,
                percentile=h.percentile,
            ),
            budget=Budget(cfg.upstream.retry_budget),
            hedge_stats=HedgeStats(),
            hedging=h.enabled,
            cache=ResponseCache(c.max_bytes, c.max_entry_bytes) if c.enabled else None,
            shared=shared,
            coalescer=Coalescer() if c.coalesce else None,
        )

    def observe_head(self, node: str, report: HeadReport) -> bool:
        """A node's probe (or newHeads) report; drops head-keyed cache entries on a move."""
        moved = self.heads.observe(node, report)
        if moved and self.cache is not None:
            self.cache.on_head(self.heads.head)
        return moved
