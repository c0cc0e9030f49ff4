"""HDR histogram face: percentiles within precision, lossless merge across processes."""

from __future__ import annotations

import random

import pytest

from bench.hist import HIGHEST_US, LatencyHistogram


def test_percentiles_within_three_significant_digits() -> None:
    hist = LatencyHistogram()
    for ms in range(1, 1001):  # 1..1000 ms, uniform
        hist.record(ms / 1000.0)
    assert hist.count == 1000
    assert hist.percentile_ms(50) == pytest.approx(500, rel=1e-3)
    assert hist.percentile_ms(99) == pytest.approx(990, rel=1e-3)
    assert hist.percentile_ms(99.9) == pytest.approx(999, rel=1e-3)
    assert hist.min_ms() == pytest.approx(1, rel=1e-3)
    assert hist.max_ms() == pytest.approx(1000, rel=1e-3)
    assert hist.mean_ms() == pytest.approx(500.5, rel=1e-3)
    summary = hist.summary()
    assert set(summary) >= {"p50_ms", "p90_ms", "p99_ms", "p99.9_ms", "mean_ms", "count"}


def test_merge_of_encoded_parts_equals_one_histogram() -> None:
    rng = random.Random(1)
    values = [rng.expovariate(1 / 0.005) for _ in range(20_000)]
    whole = LatencyHistogram()
    parts = [LatencyHistogram() for _ in range(4)]
    for i, value in enumerate(values):
        whole.record(value)
        parts[i % 4].record(value)
    merged = LatencyHistogram.merged([p.encode() for p in parts])
    assert merged.count == whole.count == 20_000
    for p in (50.0, 90.0, 99.0, 99.9, 100.0):
        assert merged.percentile_ms(p) == whole.percentile_ms(p)
    # Averaging per-part percentiles is what merging avoids; the merged p99
    # is the true p99 of all values.
    true_p99 = sorted(values)[int(0.99 * len(values)) - 1] * 1000
    assert merged.percentile_ms(99) == pytest.approx(true_p99, rel=2e-3)


def test_out_of_range_values_are_clamped_not_lost() -> None:
    hist = LatencyHistogram()
    hist.record(0.0)
    hist.record(10_000.0)  # beyond the highest trackable value
    assert hist.count == 2
    assert hist.max_ms() == pytest.approx(HIGHEST_US / 1000, rel=1e-3)


def test_empty_histogram_is_harmless() -> None:
    hist = LatencyHistogram.decode(LatencyHistogram().encode())
    assert hist.count == 0
    assert hist.percentile_ms(99) == 0.0
    assert hist.spectrum() == []
    assert LatencyHistogram.merged([b""]).count == 0


def test_spectrum_is_monotonic_and_ends_at_max() -> None:
    hist = LatencyHistogram()
    for i in range(1, 10_001):
        hist.record(i / 1e5)
    points = hist.spectrum()
    percentiles = [p for p, _ in points]
    values = [v for _, v in points]
    assert percentiles == sorted(percentiles) and values == sorted(values)
    assert points[-1] == (100.0, hist.max_ms())
    assert max(p for p in percentiles if p < 100) == pytest.approx(99.99)  # 4 nines of 10k


def test_count_above() -> None:
    hist = LatencyHistogram()
    for seconds in (0.5, 0.9, 1.5, 2.0, 3.0):
        hist.record(seconds)
    assert hist.count_above_ms(1000) == 3
    assert hist.count_above_ms(5000) == 0
