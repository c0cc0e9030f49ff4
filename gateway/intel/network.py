"""One network's intelligence in one object: what NodePool and the handler hold.

``NetworkIntel.from_config`` builds the parts from ``[cache]``, ``[hedge]``,
``[upstream]`` and ``[limits]``; the pool owns it (``pool.intel``) and feeds
it heads and latencies, the handler asks it before forwarding. See
docs/INTEL_DESIGN.md for the call sites.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gateway.config import Config
from gateway.intel.cache import ResponseCache, call_key
from gateway.intel.coalesce import Coalescer
from gateway.intel.head import HeadReport, HeadTracker, NetworkHead
from gateway.intel.hedge import Budget, HedgeStats, LatencyTracker
from gateway.intel.policy import HEAD
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
    # Some node answered its last probe on the right chain (the pool's health
    # check sets it). False: nothing the gateway cannot vouch for is answered.
    serving: bool = False

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

    def observe_head(self, node: str, report: HeadReport, *, pushed: bool = False) -> bool:
        """A node's probe (or newHeads) report; drops head-keyed cache entries on a move.

        ``pushed``: the report came from a ``newHeads`` subscription, so the
        head is as fresh as the node. Then, on a move, ``eth_blockNumber`` is
        stored at the new head and answered from the head itself (never a
        node's older number, never decreasing) until the head moves again.
        A polled head may be a probe interval old: there ``eth_blockNumber``
        keeps asking a node (and is clamped to the head, never decreasing).
        """
        moved = self.heads.observe(node, report)
        if moved and self.cache is not None:
            self.cache.on_head(self.heads.head)
            if pushed:
                self._seed_block_number()
        return moved

    def _seed_block_number(self) -> None:
        cache, head = self.cache, self.heads.head
        if cache is not None and self.serving and head.known:
            for key in _BLOCK_NUMBER_KEYS:
                cache.put(key, HEAD, head, b'"%s"' % hex(head.number).encode())

    def set_serving(self, serving: bool) -> None:
        """Whether any node is in service; without one, head-dependent entries go at once.

        Immutable answers (``FOREVER``, and by-hash answers at or below the
        finalized block) stay: they are true whatever the nodes do now.
        """
        self.serving = serving
        if not serving and self.cache is not None:
            self.cache.on_head(_NO_HEAD)


# A tag no real head has: ``on_head`` with it drops every head-keyed entry.
_NO_HEAD: Final = NetworkHead(-1, "no node in service")
# The ways a client may ask eth_blockNumber (no params, or an empty list).
_BLOCK_NUMBER_KEYS: Final = (call_key("eth_blockNumber", None), call_key("eth_blockNumber", []))
