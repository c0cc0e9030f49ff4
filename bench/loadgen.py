"""The load generator: worker processes driving keep-alive connections.

Two modes:

* open loop (``rate > 0``): request *i* is due at ``start + i / rate`` no matter
  how slow the server is.  Its latency is measured from that intended send
  time, so time spent queued behind a slow server is counted (no coordinated
  omission, as in wrk2).  Processes interleave: process *k* sends requests
  ``k, k+P, k+2P, ...``.
* closed loop (``rate == 0``): every connection sends its next request as soon
  as the previous answer arrives; this finds maximum throughput, and latency
  is measured from the actual send.

Each process runs its own event loop (uvloop when available), records into
HDR histograms per outcome kind and ships them, encoded, to the parent, which
merges them and drives the progress bar.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

from bench.hist import LatencyHistogram
from bench.loadworker import LoadSpec, WorkerStats, _Worker, intended_times

# LoadSpec, WorkerStats and the per-process worker are bench.loadworker's; re-exported
__all__ = ["LoadResult", "LoadRun", "LoadSpec", "WorkerStats", "intended_times", "run_load"]

# ---- process plumbing ------------------------------------------------------


def _split(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed: it roughly halves the generator's CPU per request."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _worker_main(
    spec: LoadSpec, index: int, out: Any, go: MpEvent, start_at: Any
) -> None:  # pragma: no cover - runs in a child process, covered by test_bench_loadgen
    if spec.cpus is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, spec.cpus)
    loop = _new_loop()
    worker = _Worker(spec, index, _split(spec.connections, spec.processes, index))

    def progress(st: WorkerStats) -> None:
        out.put(("progress", index, st.sent, sum(st.kinds.values()), _errors(st.kinds)))

    try:
        try:
            loop.run_until_complete(worker.connect_all())
        except OSError as exc:
            out.put(("error", index, f"cannot connect to {spec.host}:{spec.port}: {exc}"))
            return
        out.put(("ready", index))
        go.wait()
        stats = loop.run_until_complete(worker.run(start_at.value, progress))
        out.put(("result", index, stats))
    finally:
        loop.close()


def _errors(kinds: collections.Counter[str]) -> int:
    return sum(n for k, n in kinds.items() if k != "ok")


@dataclass
class LoadResult:
    """Merged measurements of all processes."""

    spec: LoadSpec
    start: float
    end: float
    sent: int
    kinds: collections.Counter[str]
    hists: dict[str, LatencyHistogram]
    first_done: dict[str, float]
    last_done: dict[str, float]
    first_sent: dict[str, float]
    last_sent: dict[str, float]
    timeline: collections.Counter[tuple[int, str]]
    per_key: collections.Counter[tuple[int, str]]
    retry_after: int
    lag: LatencyHistogram
    cpu_s: list[float]
    second_hists: dict[int, LatencyHistogram]
    # Filled by the scenario when it owns the stack (bench/partcpu.py): CPU
    # seconds of each other part over this run, their CPUs, per-CPU
    # (busy, total) ticks machine-wide, and Redis's own INFO cpu delta.
    parts_cpu_s: dict[str, float] = field(default_factory=dict)
    parts_cpus: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    cpu_ticks: dict[int, tuple[int, int]] = field(default_factory=dict)
    redis_info_cpu_s: float | None = None

    @classmethod
    def merge(cls, spec: LoadSpec, parts: list[WorkerStats]) -> LoadResult:
        res = cls(
            spec=spec,
            start=min(p.start for p in parts),
            end=max(p.end for p in parts),
            sent=sum(p.sent for p in parts),
            kinds=collections.Counter(),
            hists={},
            first_done={},
            last_done={},
            first_sent={},
            last_sent={},
            timeline=collections.Counter(),
            per_key=collections.Counter(),
            retry_after=sum(p.retry_after for p in parts),
            lag=LatencyHistogram.merged([p.lag_hist for p in parts]),
            cpu_s=[p.cpu_s for p in parts],
            second_hists={},
        )
        for p in parts:
            res.kinds.update(p.kinds)
            res.timeline.update(p.timeline)
            res.per_key.update(p.per_key)
            for kind, payload in p.hists.items():
                res.hists.setdefault(kind, LatencyHistogram()).merge(
                    LatencyHistogram.decode(payload)
                )
            for second, payload in p.second_hists.items():
                res.second_hists.setdefault(second, LatencyHistogram()).merge(
                    LatencyHistogram.decode(payload)
                )
            for src, dst, pick in (
                (p.first_done, res.first_done, min),
                (p.first_sent, res.first_sent, min),
                (p.last_done, res.last_done, max),
                (p.last_sent, res.last_sent, max),
            ):
                for kind, t in src.items():
                    dst[kind] = pick(dst[kind], t) if kind in dst else t
        return res

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def completed(self) -> int:
        return sum(h.count for h in self.hists.values())

    def latency(self, kinds: tuple[str, ...] | None = None) -> LatencyHistogram:
        """Merged histogram of the given kinds (all answered kinds by default)."""
        out = LatencyHistogram()
        for kind, hist in self.hists.items():
            if kinds is None or kind in kinds:
                out.merge(hist)
        return out

    def rate_of(self, kind: str) -> float:
        return self.kinds.get(kind, 0) / self.duration_s


class LoadRun:
    """A load run in flight; ``started`` resolves to its start (monotonic s)."""

    def __init__(self, spec: LoadSpec, *, progress: bool = True, label: str = "") -> None:
        self.spec = spec
        self.started: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._progress = progress
        self._label = label

    async def run(self) -> LoadResult:
        spec = self.spec
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        go = ctx.Event()
        start_at = ctx.Value("d", 0.0)
        procs = [
            ctx.Process(target=_worker_main, args=(spec, i, out, go, start_at), daemon=True)
            for i in range(spec.processes)
        ]
        for proc in procs:
            proc.start()
        bar = _Bar(spec, self._label) if self._progress else None
        try:
            ready = 0
            while ready < spec.processes:
                msg = await _get(out, procs)
                if msg[0] == "error":
                    raise ConnectionError(msg[2])
                ready += msg[0] == "ready"
            start_at.value = time.monotonic() + 0.05
            go.set()
            self.started.set_result(start_at.value)
            done: dict[int, tuple[int, int, int]] = {}
            results: list[WorkerStats] = []
            while len(results) < spec.processes:
                msg = await _get(out, procs)
                if msg[0] == "progress":
                    done[msg[1]] = msg[2:]
                    if bar is not None:
                        bar.update(start_at.value, done)
                elif msg[0] == "result":
                    results.append(msg[2])
            return LoadResult.merge(spec, results)
        finally:
            if not self.started.done():
                self.started.cancel()
            if bar is not None:
                bar.close()
            for proc in procs:
                proc.join(timeout=2)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            out.close()
            out.join_thread()


async def _get(out: Any, procs: list[Any]) -> Any:
    """Next message from the workers without blocking the event loop."""
    while True:
        try:
            return out.get_nowait()
        except queue_mod.Empty:
            dead = [p for p in procs if not p.is_alive()]
            if len(dead) == len(procs) or any(p.exitcode for p in dead):
                try:  # a last message may still be in the pipe
                    return out.get(timeout=1.0)
                except queue_mod.Empty:
                    raise RuntimeError("a load-generator process died") from None
            await asyncio.sleep(0.02)


class _Bar:
    """tqdm progress bar on stderr: elapsed seconds, with req/s and errors."""

    def __init__(self, spec: LoadSpec, label: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=round(spec.duration_s, 1),
            unit="s",
            desc=label or ("open-loop" if spec.rate else "closed-loop"),
            file=sys.stderr,
            leave=False,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total}s {postfix}",
            dynamic_ncols=True,
            disable=None,  # no bar when stderr is not a terminal
        )

    def update(self, start: float, done: dict[int, tuple[int, int, int]]) -> None:
        total = float(self._bar.total)
        elapsed = min(max(0.0, time.monotonic() - start), total)
        completed = sum(d[1] for d in done.values())
        errors = sum(d[2] for d in done.values())
        rps = completed / elapsed if elapsed > 0 else 0.0
        self._bar.n = round(elapsed, 1)
        self._bar.set_postfix_str(f"{completed} done, {rps:,.0f} req/s, {errors} errors")

    def close(self) -> None:
        self._bar.close()


async def run_load(spec: LoadSpec, *, progress: bool = True, label: str = "") -> LoadResult:
    """Run one load to completion (use :class:`LoadRun` to act while it runs)."""
    return await LoadRun(spec, progress=progress, label=label).run()
