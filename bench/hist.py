"""Latency histograms: a thin face over HdrHistogram, in microseconds.

HDR histograms keep a fixed relative precision (3 significant digits here)
over the whole range, so p99.9 is as trustworthy as p50, and they merge
losslessly: each load-generator process encodes its histogram and the parent
adds them up, instead of averaging per-process percentiles (which is wrong).
"""

from __future__ import annotations

from typing import Final

from hdrh.histogram import HdrHistogram

LOWEST_US: Final = 1
HIGHEST_US: Final = 300_000_000  # 5 minutes; longer waits are clamped
SIG_FIGS: Final = 3

# Percentiles the report prints, and the spectrum the plot draws.
REPORT_PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)


class LatencyHistogram:
    """Records latencies given in seconds; reports milliseconds."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIG_FIGS)

    def record(self, seconds: float) -> None:
        """Record one latency; values outside the range are clamped, not lost."""
        us = int(seconds * 1_000_000.0 + 0.5)
        self._h.record_value(min(max(us, LOWEST_US), HIGHEST_US))

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def percentile_ms(self, percentile: float) -> float:
        """Value at ``percentile`` (0-100), in ms; 0.0 for an empty histogram."""
        if not self.count:
            return 0.0
        return float(self._h.get_value_at_percentile(percentile)) / 1000.0

    def mean_ms(self) -> float:
        return float(self._h.get_mean_value()) / 1000.0 if self.count else 0.0

    def max_ms(self) -> float:
        return float(self._h.get_max_value()) / 1000.0 if self.count else 0.0

    def min_ms(self) -> float:
        return float(self._h.get_min_value()) / 1000.0 if self.count else 0.0

    def count_above_ms(self, ms: float) -> int:
        """How many recorded values exceed ``ms`` (within histogram precision)."""
        limit = ms * 1000.0
        return sum(
            int(item.count_added_in_this_iter_step)
            for item in self._h.get_recorded_iterator()
            if item.value_iterated_to > limit
        )

    def summary(self) -> dict[str, float]:
        """count, mean, min, max and the report percentiles, all in ms."""
        out: dict[str, float] = {"count": float(self.count), "mean_ms": self.mean_ms()}
        for p in REPORT_PERCENTILES:
            out[f"p{p:g}_ms"] = self.percentile_ms(p)
        out["min_ms"] = self.min_ms()
        out["max_ms"] = self.max_ms()
        return out

    def spectrum(self, max_nines: int = 5, steps_per_nine: int = 10) -> list[tuple[float, float]]:
        """(percentile, ms) pairs spaced evenly in "nines" (log of 1/(1-p)).

        This is the classic HdrHistogram percentile plot: the tail gets as
        much room as the median, so p99.9 behaviour is visible.
        """
        if not self.count:
            return []
        points: list[tuple[float, float]] = []
        limit = min(max_nines, _nines_supported(self.count))
        for i in range(limit * steps_per_nine + 1):
            p = 100.0 * (1.0 - 10.0 ** (-i / steps_per_nine))
            points.append((p, self.percentile_ms(p)))
        points.append((100.0, self.max_ms()))
        return points

    def merge(self, other: LatencyHistogram) -> None:
        self._h.add(other._h)

    def encode(self) -> bytes:
        """Compressed, base64 HdrHistogram V2 payload (interoperable)."""
        return bytes(self._h.encode())

    @classmethod
    def decode(cls, payload: bytes) -> LatencyHistogram:
        hist = cls()
        if payload:
            hist._h.decode_and_add(payload)
        return hist

    @classmethod
    def merged(cls, payloads: list[bytes]) -> LatencyHistogram:
        hist = cls()
        for payload in payloads:
            if payload:
                hist._h.decode_and_add(payload)
        return hist


def _nines_supported(count: int) -> int:
    """How many nines a sample of ``count`` values can say anything about."""
    nines = 0
    while count >= 10 ** (nines + 1) and nines < 9:
        nines += 1
    return max(nines, 1)
