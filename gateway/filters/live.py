"""``LiveFilters``: this worker's view of a network's live filters, for the gauge.

Filter state lives in Redis under each key's own hash tag, so there is no
one place to count a network's filters without a scan. Each worker instead
counts the filters it made or polled and has not seen uninstalled, dropping
one once ``filters.ttl_s`` has passed since it last saw it (when Redis has
expired it too, unless another worker polled it since). The gauge is
updated on every filter call (no timer); its help text says what it is.
"""

from __future__ import annotations

import time
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client import Gauge as PromGauge


class Gauge(Protocol):
    """A gauge child (``prometheus_client``'s ``Gauge.labels(...)``)."""

    def set(self, value: float) -> None: ...


def live_gauge(registry: CollectorRegistry) -> PromGauge:
    """``gateway_filters_live{network}`` on the app's registry (once per app)."""
    return PromGauge(
        "gateway_filters_live",
        "Filters (eth_newFilter and kin) this worker made or polled, not uninstalled "
        "and not idle past filters.ttl_s; updated on each filter call, summed over "
        "workers (a filter used from two workers counts in each)",
        ["network"],
        registry=registry,
        multiprocess_mode="livesum",
    )


class LiveFilters:
    """Filter id -> when this worker stops counting it (monotonic seconds, oldest first)."""

    def __init__(self, ttl_s: float, gauge: Gauge | None = None) -> None:
        self._ttl_s = ttl_s
        self._gauge = gauge
        self._until: dict[str, float] = {}

    def seen(self, fid: str) -> None:
        """Made or polled now: counted until ``ttl_s`` from now."""
        until = self._until
        until.pop(fid, None)  # re-inserted last: the dict stays in deadline order
        until[fid] = time.monotonic() + self._ttl_s
        self._update()

    def gone(self, fid: str) -> None:
        """Uninstalled, or not found."""
        self._until.pop(fid, None)
        self._update()

    def __len__(self) -> int:
        return len(self._until)

    def _update(self) -> None:
        now = time.monotonic()
        until = self._until
        while until:  # the oldest deadline first (insertion order)
            fid = next(iter(until))
            if until[fid] > now:
                break
            del until[fid]
        if self._gauge is not None:
            self._gauge.set(len(until))
