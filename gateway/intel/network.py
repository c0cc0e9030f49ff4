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
from gateway.intel.head import HeadReport, HeadRules, HeadTracker, NetworkHead
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
        block_time_s: float = 0.0,
    ) -> NetworkIntel:
        """The parts for one network; ``nodes`` are the pool's node names.

        ``block_time_s`` (the network's) sets the default ``head.stale_s``:
        ten block times.
        """
        c, h, hd = cfg.cache, cfg.hedge, cfg.head
        rules = HeadRules(
            stale_s=hd.stale_s or 10 * block_time_s,
            quorum=hd.quorum,
            solo_lead=hd.solo_lead,
            clock_skew_s=hd.clock_skew_s,
            max_mismatches=hd.max_mismatches,
        )
        if clock is None:
            heads = HeadTracker(nodes, rules=rules)
        else:
            heads = HeadTracker(nodes, clock=clock, rules=rules)
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

    # -- the head's feeders: each drops head-keyed cache entries when the tag moves
    def observe_head(self, node: str, report: HeadReport, *, pushed: bool = False) -> bool:
        """A node's probe report (an HTTP answer: it vouches for its latest block).

        ``pushed``: the head is as fresh as the node (it follows ``newHeads``).
        Then, on a move, ``eth_blockNumber`` is stored at the head and answered
        from the head itself until it moves again. A polled head may be a
        probe interval old: there ``eth_blockNumber`` keeps asking a node.
        """
        old = self.heads.head.tag
        self.heads.observe(node, report)
        return self._after(old, pushed)

    def claim(self, node: str, number: int, digest: str | None = None) -> bool:
        """A header a node pushed (or a number it answered): True to ask it for that block."""
        old = self.heads.head.tag
        ask = self.heads.claim(node, number, digest)
        self._after(old, False)  # a claim moves nothing, but may eject its node
        return ask

    def vouch(
        self,
        node: str,
        number: int,
        digest: str | None,
        *,
        pushed: bool = False,
        stamp: int | None = None,
        parent: str | None = None,
    ) -> bool:
        """A node's HTTP answer named block ``number`` with ``digest`` (a confirmation)."""
        old = self.heads.head.tag
        self.heads.vouch(node, number, digest, stamp, parent)
        return self._after(old, pushed)

    def forget(self, node: str) -> bool:
        """The node left service: the head is recomputed without anything it said."""
        old = self.heads.head.tag
        self.heads.forget(node)
        return self._after(old, False)

    def _after(self, old: tuple[int, str | None], pushed: bool) -> bool:
        head = self.heads.head
        if head.tag == old:
            return False
        if self.cache is not None:
            self.cache.on_head(head)
            if pushed:
                self._seed_block_number()
        return True

    def _seed_block_number(self) -> None:
        cache, head = self.cache, self.heads.head
        if cache is not None and self.serving and head.known:
            number = self.heads.block_number()
            for key in _BLOCK_NUMBER_KEYS:
                cache.put(key, HEAD, head, b'"%s"' % hex(number).encode())

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
