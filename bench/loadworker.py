"""One load-generator process: its connections, the open- or closed-loop schedule,
and what it measures (``WorkerStats``); ``bench.loadgen`` starts the processes,
merges their stats and drives the progress bar.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.client import ClientConn, Response, classify
from bench.hist import LatencyHistogram

_PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True)
class LoadSpec:
    """What to send, how fast, from how many processes and connections."""

    host: str
    port: int
    requests: tuple[bytes, ...]  # full HTTP requests, used round-robin by sequence number
    duration_s: float
    rate: float = 0.0  # total arrivals per second; 0 = closed loop
    connections: int = 32  # total, split across processes
    processes: int = 1
    timeout_s: float = 10.0
    drain_s: float = 2.0  # after the end, wait this long for answers in flight
    keys_of: tuple[int, ...] = ()  # key index per request template (for per-key counts)
    timeline_step_s: float = 0.01  # resolution of event timing in fault scenarios
    cpus: tuple[int, ...] | None = None  # pin worker processes to these CPUs

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError("no requests to send")
        if self.processes < 1 or self.connections < self.processes:
            raise ValueError("need processes >= 1 and connections >= processes")
        if self.rate < 0 or self.duration_s <= 0:
            raise ValueError("rate must be >= 0 and duration > 0")


def intended_times(
    start: float, rate: float, index: int, processes: int, end: float
) -> list[float]:
    """Intended send times of one process's share of an open-loop schedule.

    Exposed for tests: the union over all processes is exactly
    ``start + i / rate`` for every ``i`` with a time before ``end``.
    """
    out: list[float] = []
    i = index
    while (t := start + i / rate) < end:
        out.append(t)
        i += processes
    return out


@dataclass
class WorkerStats:
    """What one process measured; plain data so it pickles cheaply."""

    start: float = 0.0
    end: float = 0.0
    sent: int = 0
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    hists: dict[str, bytes] = field(default_factory=dict)
    first_done: dict[str, float] = field(default_factory=dict)
    last_done: dict[str, float] = field(default_factory=dict)
    first_sent: dict[str, float] = field(default_factory=dict)
    last_sent: dict[str, float] = field(default_factory=dict)
    timeline: collections.Counter[tuple[int, str]] = field(default_factory=collections.Counter)
    per_key: collections.Counter[tuple[int, str]] = field(default_factory=collections.Counter)
    retry_after: int = 0  # 429 answers that carried Retry-After
    lag_hist: bytes = b""  # dispatcher lateness (open loop), seconds recorded
    second_hists: dict[int, bytes] = field(default_factory=dict)  # latency per second
    cpu_s: float = 0.0


class _Worker:
    """One process's share of the load: its connections, schedule and records."""

    def __init__(self, spec: LoadSpec, index: int, n_conns: int) -> None:
        self.spec = spec
        self.index = index
        self.n_conns = n_conns
        self.stats = WorkerStats()
        self.hists: dict[str, LatencyHistogram] = {}
        self.lag = LatencyHistogram()
        self.second_hists: dict[int, LatencyHistogram] = {}
        self.idle: collections.deque[ClientConn] = collections.deque()
        self.busy: set[ClientConn] = set()
        self.backlog: collections.deque[tuple[int, float]] = collections.deque()
        self.slots_down = 0  # connections lost and not yet re-established
        self.open_loop = spec.rate > 0
        self.seq = index  # closed loop: next sequence number
        self.start = 0.0
        self.end = math.inf
        self.stopping = False
        self.reconnects: set[asyncio.Task[None]] = set()
        self.drained = asyncio.Event()  # set whenever nothing is in flight

    # ---- connections -------------------------------------------------------

    async def _open(self) -> ClientConn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: ClientConn(self._on_response, self._on_lost), self.spec.host, self.spec.port
        )
        return conn

    async def connect_all(self) -> None:
        conns = await asyncio.gather(*(self._open() for _ in range(self.n_conns)))
        self.idle.extend(conns)

    def _on_lost(self, conn: ClientConn) -> None:
        self.busy.discard(conn)
        if not self.busy and not self.backlog:
            self.drained.set()
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)
        if conn.inflight is not None:
            seq, _, sent = conn.inflight
            conn.inflight = None
            self._record_failure("conn_error", seq, sent)
        self.slots_down += 1
        if not self.stopping:
            self._spawn_reconnect(0.0)

    def _spawn_reconnect(self, delay: float) -> None:
        task = asyncio.ensure_future(self._reconnect(delay))
        self.reconnects.add(task)
        task.add_done_callback(self.reconnects.discard)

    async def _reconnect(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self.stopping:
            return
        try:
            conn = await self._open()
        except OSError:
            # The server refuses: in the open loop the oldest waiting request
            # fails now (it would have failed in a real client too).
            now = time.monotonic()
            if self.open_loop and self.backlog:
                seq, _ = self.backlog.popleft()
                self._record_failure("conn_error", seq, now)
                if not self.busy and not self.backlog:
                    self.drained.set()
            elif not self.open_loop and now < self.end:
                self._record_failure("conn_error", self._next_seq(), now)
            self._spawn_reconnect(0.01)
            return
        self.slots_down -= 1
        if self.stopping:
            conn.closed = True
            conn.abort()
            return
        self._release(conn)

    # ---- sending -----------------------------------------------------------

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq += self.spec.processes
        return seq

    def _send(self, conn: ClientConn, seq: int, intended: float) -> None:
        now = time.monotonic()
        conn.inflight = (seq, intended, now)
        self.busy.add(conn)
        self.stats.sent += 1
        conn.send(self.spec.requests[seq % len(self.spec.requests)])

    def _release(self, conn: ClientConn) -> None:
        """A connection became free: give it the next piece of work."""
        if self.open_loop:
            if self.backlog and not self.stopping:
                seq, intended = self.backlog.popleft()
                self._send(conn, seq, intended)
                return
        elif time.monotonic() < self.end and not self.stopping:
            self._send(conn, self._next_seq(), 0.0)
            return
        self.idle.append(conn)
        if not self.busy and not self.backlog:
            self.drained.set()

    def _on_response(self, conn: ClientConn, resp: Response) -> None:
        now = time.monotonic()
        if conn.inflight is None:
            return
        seq, intended, sent = conn.inflight
        conn.inflight = None
        self.busy.discard(conn)
        kind = classify(resp)
        if resp.status == 429 and resp.retry_after:
            self.stats.retry_after += 1
        self._record(kind, seq, intended if self.open_loop else sent, sent, now)
        if resp.close:
            conn.closed = True
            conn.abort()
            self.slots_down += 1
            if not self.stopping:
                self._spawn_reconnect(0.0)
        else:
            self._release(conn)

    # ---- recording ---------------------------------------------------------

    def _record(self, kind: str, seq: int, t0: float, sent: float, now: float) -> None:
        st = self.stats
        st.kinds[kind] += 1
        hist = self.hists.get(kind)
        if hist is None:
            hist = self.hists[kind] = LatencyHistogram()
        hist.record(now - t0)
        second = int(now - self.start)
        per_second = self.second_hists.get(second)
        if per_second is None:
            per_second = self.second_hists[second] = LatencyHistogram()
        per_second.record(now - t0)
        self._mark(kind, seq, sent, now)

    def _record_failure(self, kind: str, seq: int, sent: float) -> None:
        self.stats.kinds[kind] += 1
        self._mark(kind, seq, sent, time.monotonic())

    def _mark(self, kind: str, seq: int, sent: float, now: float) -> None:
        st = self.stats
        if kind not in st.first_done:
            st.first_done[kind] = now
            st.first_sent[kind] = sent
        st.last_done[kind] = now
        st.last_sent[kind] = sent
        st.timeline[(int((now - self.start) / self.spec.timeline_step_s), kind)] += 1
        if self.spec.keys_of:
            st.per_key[(self.spec.keys_of[seq % len(self.spec.keys_of)], kind)] += 1

    # ---- running -----------------------------------------------------------

    async def run(self, start: float, progress: Callable[[WorkerStats], None]) -> WorkerStats:
        self.start = start
        self.end = start + self.spec.duration_s
        self.stats.start = start
        self.stats.end = self.end
        cpu0 = time.process_time()
        sweeper = asyncio.ensure_future(self._sweep(progress))
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        if self.open_loop:
            await self._open_loop()
        else:
            while self.idle:
                self._send(self.idle.popleft(), self._next_seq(), 0.0)
            await asyncio.sleep(max(0.0, self.end - time.monotonic()))
        await self._drain()
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        self.stats.cpu_s = time.process_time() - cpu0
        self.stats.hists = {k: h.encode() for k, h in self.hists.items()}
        self.stats.lag_hist = self.lag.encode()
        self.stats.second_hists = {k: h.encode() for k, h in self.second_hists.items()}
        progress(self.stats)
        return self.stats

    async def _open_loop(self) -> None:
        spec = self.spec
        i = self.index
        start, end, rate, step = self.start, self.end, spec.rate, spec.processes
        t_next = start + i / rate
        while t_next < end:
            now = time.monotonic()
            while t_next <= now:
                # The dispatcher's own lateness (timer granularity, about 1 ms)
                # is the generator's fault, not the server's: it is recorded
                # apart and latency runs from when the request became due here.
                # Waiting for a free connection still counts as latency.
                self.lag.record(now - t_next)
                if self.idle:
                    self._send(self.idle.popleft(), i, now)
                else:
                    self.backlog.append((i, now))
                i += step
                t_next = start + i / rate
                if t_next >= end:
                    break
            # Event-loop timers have millisecond resolution: a shorter sleep
            # would spin and steal CPU from whatever shares the core.
            await asyncio.sleep(max(0.001, min(t_next, end) - time.monotonic()))
        # Requests still queued are sent during the drain: they are the slowest
        # ones, and dropping them would flatter the tail.

    async def _drain(self) -> None:
        if self.busy or self.backlog:
            self.drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drained.wait(), self.spec.drain_s)
        self.stopping = True
        now = time.monotonic()
        while self.backlog:  # offered, but never sent before the drain ended
            seq, _ = self.backlog.popleft()
            self._record_failure("not_sent", seq, now)
        for conn in list(self.busy):
            if conn.inflight is not None:
                seq, _, sent = conn.inflight
                conn.inflight = None
                self._record_failure("unfinished", seq, sent)
        for task in list(self.reconnects):
            task.cancel()
        for conn in list(self.busy) + list(self.idle):
            conn.closed = True
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.sleep(0)

    async def _sweep(self, progress: Callable[[WorkerStats], None]) -> None:
        """Time out stuck requests and report progress, a few times a second."""
        timeout = self.spec.timeout_s
        last_progress = 0.0
        while True:
            await asyncio.sleep(min(0.05, timeout / 4))
            now = time.monotonic()
            for conn in list(self.busy):
                if conn.inflight is not None and now - conn.inflight[2] > timeout:
                    seq, _, sent = conn.inflight
                    conn.inflight = None
                    self._record_failure("timeout", seq, sent)
                    conn.abort()
            if now - last_progress >= _PROGRESS_EVERY_S:
                last_progress = now
                progress(self.stats)
