"""Synthetic load results, built from plain (sent, kind, latency) tuples.

Used by the harness's own tests to check verdicts and reports against numbers
worked out by hand, with no sockets and no clock involved.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

from bench.hist import LatencyHistogram
from bench.loadgen import LoadResult, LoadSpec, WorkerStats

START = 1000.0  # a monotonic-clock origin; tests use times relative to it


def fake_result(
    events: list[tuple[float, str, float]],
    *,
    duration: float = 10.0,
    rate: float = 100.0,
    step: float = 0.01,
    keys_of: Mapping[int, int] | None = None,
    retry_after: int | None = None,
) -> LoadResult:
    """A result from (sent at s, kind, latency s) tuples; key of event i is keys_of[i]."""
    st = WorkerStats(start=START, end=START + duration)
    hists: dict[str, LatencyHistogram] = {}
    seconds: dict[int, LatencyHistogram] = {}
    for i, (sent, kind, latency) in enumerate(events):
        done = sent + latency
        st.sent += 1
        st.kinds[kind] += 1
        hists.setdefault(kind, LatencyHistogram()).record(latency)
        seconds.setdefault(int(done), LatencyHistogram()).record(latency)
        abs_sent, abs_done = START + sent, START + done
        st.first_sent[kind] = min(st.first_sent.get(kind, abs_sent), abs_sent)
        st.last_sent[kind] = max(st.last_sent.get(kind, abs_sent), abs_sent)
        st.first_done[kind] = min(st.first_done.get(kind, abs_done), abs_done)
        st.last_done[kind] = max(st.last_done.get(kind, abs_done), abs_done)
        st.timeline[(int(done / step), kind)] += 1
        if keys_of is not None:
            st.per_key[(keys_of[i], kind)] += 1
    st.hists = {k: h.encode() for k, h in hists.items()}
    st.second_hists = {k: h.encode() for k, h in seconds.items()}
    st.lag_hist = LatencyHistogram().encode()
    st.retry_after = st.kinds["http_429"] if retry_after is None else retry_after
    st.cpu_s = duration * 0.25
    spec = LoadSpec(
        host="127.0.0.1",
        port=1,
        requests=(b"x",),
        duration_s=duration,
        rate=rate,
        timeline_step_s=step,
        keys_of=tuple(sorted(set((keys_of or {0: 0}).values()))),
    )
    return LoadResult.merge(spec, [st])


def counter(**kinds: int) -> collections.Counter[str]:
    return collections.Counter(kinds)
