"""Soak: everything a public endpoint sees, for minutes, while memory and handles are sampled.

Mixed HTTP over thousands of keys (reads with many distinct params, so the
answer cache fills to its bound) with every refusal class (401 unknown and
revoked keys, 429 on a tiny plan, 405, 413, 415, 400 body not its
Content-Encoding, 417, -32700, -32600, -32601, malformed HTTP), WebSocket
churn (open, call, close or drop), slow clients (a head one byte at a time,
an answer never read) and aborting ones (a reset mid-request). Every
``--sample-every`` seconds: RSS and open FDs of each gateway worker, open
connections, cache bytes and entries (the gateway's /metrics), and Redis
``used_memory``. The verdict: after ``--warmup``, each series' least-squares
slope per minute stays under its bound; no 500 (no 5xx but 502/503/504);
no worker restarted. A plot shows every series over time.

Local stack only (it reads the processes and the metrics)::

    python -m bench soak --duration 10m
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import shlex
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from argon2 import PasswordHasher
from redis.asyncio import Redis

from bench import verdicts as v
from bench.scenarios.common import Env, base_report, finish, log
from bench.scenarios.soaktraffic import MAX_BODY, Traffic
from bench.stack import Stack, StackOptions, free_port, process_tree
from gateway.config import load_config
from gateway.store.accounts import Store

SOAK = (
    "Mixed HTTP over many keys with every refusal class, WebSocket churn, slow and aborting "
    "clients; RSS, FDs, connections, cache and Redis memory sampled over time; a verdict on "
    "their slopes after the warm-up."
)

TINY_PLAN = "soaktiny"  # 429s on demand
# Per minute, after the warm-up: what "flat" means here. FDs and connections
# swing by tens with the hostile clients (held up to 15 s each), so their
# bound is a few per minute over the judged span. Redis holds usage and
# insight counters per key with day-long TTLs: they grow with distinct keys
# until the TTLs turn them over, so its bound is a rate, not zero.
SLOPE_LIMITS = {
    "rss_mib_per_worker": 0.5,
    "fds": 5.0,
    "connections": 5.0,
    "redis_used_mib": 5.0,
}


def extra_toml(cache_max_bytes: int) -> str:
    return f"""
[plans.{TINY_PLAN}]
title = "Soak (tiny)"
# far below the ~2 % of the traffic it gets at any --rate: every call after the
# first in ten seconds is refused, so the 429 class shows however slow the box
rate = 0.1
burst = 1

[limits]
max_body_bytes = {MAX_BODY}

[cache]
max_bytes = {cache_max_bytes}
"""


# ---- keys -----------------------------------------------------------------------
async def make_keys(stack: Stack, count: int) -> tuple[list[str], str, list[tuple[str, str]]]:
    """``count`` keys on the unlimited plan, one on the tiny plan, and 10 to revoke later.

    Written with the store directly: the operator CLI starts a process per key,
    and without a per-account cap (each check counts the account's keys, which
    made thousands of keys quadratic). Passwords get the cheapest argon2id:
    nobody signs in to these accounts.
    """
    assert stack.config_path is not None
    cfg = load_config(stack.config_path, env={"GATEWAY_REDIS_URL": stack.redis_url})
    redis = Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        store = Store(
            redis,
            prefix=cfg.redis.prefix,
            plans=[p.name for p in cfg.plans],
            default_plan=cfg.default_plan,
            hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1),
            max_keys=None,
        )
        run = secrets.token_hex(3)
        big = await store.create_account(f"soak-{run}@example.com", "soak password", plan="bench")
        tiny = await store.create_account(f"tiny-{run}@example.com", "soak password", TINY_PLAN)
        keys = [(await store.create_key(big.id, name=f"k{i}"))[0] for i in range(count)]
        tiny_key, _ = await store.create_key(tiny.id, name="tiny")
        doomed = []
        for i in range(10):
            key, record = await store.create_key(big.id, name=f"revoke-{i}")
            doomed.append((key, record.id))
        return keys, tiny_key, doomed
    finally:
        await redis.aclose()


async def revoke(stack: Stack, key_id: str) -> None:
    assert stack.config_path is not None
    cfg = load_config(stack.config_path, env={"GATEWAY_REDIS_URL": stack.redis_url})
    redis = Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        await Store.from_config(redis, cfg).revoke_key(key_id)
    finally:
        await redis.aclose()


# ---- traffic --------------------------------------------------------------------
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ([0-9.e+-]+)$", re.M)


async def scrape_totals(url: str) -> dict[str, float]:
    """Each metric family's samples summed over labels (unlabelled ones too)."""
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for name, value in _SAMPLE.findall(text):
        out[name] = out.get(name, 0.0) + float(value)
    return out


def _proc_status(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


async def sample(stack: Stack, metrics_url: str, redis: Redis, t0: float) -> dict[str, Any]:
    assert stack.gateway is not None
    workers = process_tree(stack.gateway.pid)[1:] or [stack.gateway.pid]
    rss = {p: (_proc_status(p, "VmRSS") or 0) / 1024 for p in workers}
    fds = {p: _fds(p) or 0 for p in workers}
    metrics = await scrape_totals(metrics_url)
    info = await redis.info("memory")
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "workers": sorted(workers),
        "rss_mib": {str(p): round(m, 2) for p, m in rss.items()},
        "rss_mib_per_worker": round(sum(rss.values()) / len(rss), 2),
        "fds": sum(fds.values()),
        "connections": metrics.get("gateway_open_connections", 0.0),
        "ws_sockets": metrics.get("gateway_ws_sockets", 0.0),
        "cache_mib": round(metrics.get("gateway_cache_bytes", 0.0) / 2**20, 3),
        "cache_entries": metrics.get("gateway_cache_entries", 0.0),
        "redis_used_mib": round(int(info["used_memory"]) / 2**20, 3),
    }


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t seconds, value), per minute; None under 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(x for _, x in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None
    return 60.0 * sum((t - mt) * (x - mv) for t, x in points) / den


# ---- the scenario ---------------------------------------------------------------
@contextlib.asynccontextmanager
async def _stack(args: argparse.Namespace, metrics_port: int) -> AsyncIterator[Env]:
    opts = StackOptions(
        bsc_nodes=1,
        gateway_workers=args.workers,
        door=args.door,
        gateway_cmd=tuple(shlex.split(args.gateway_cmd)),
        pin=not args.no_pin,
        keep_dir=args.keep_stack_dir,
        metrics_port=metrics_port,
        extra_toml=extra_toml(args.cache_max_bytes),
    )
    log("starting a local stack (redis, mock nodes, gateway)")
    async with Stack.start(opts) as stack:
        assert stack.gateway is not None
        yield Env(args, stack, stack.gateway.url)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    if args.target:
        raise SystemExit("bench: soak needs the local stack (it samples the processes)")
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    async with _stack(args, metrics_port) as env:
        stack = env.stack
        assert stack is not None and stack.gateway is not None
        keys, tiny, doomed = await make_keys(stack, args.keys)
        log(f"{len(keys)} keys; load {args.rate:g} req/s for {args.duration:g} s")
        traffic = Traffic(env.gateway_url, keys + [k for k, _ in doomed], tiny, args.seed)
        redis = Redis.from_url(stack.redis_url)
        samples: list[dict[str, Any]] = []
        t0 = time.monotonic()
        connector = aiohttp.TCPConnector(limit=64)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            loops = [
                asyncio.ensure_future(traffic.http_loop(session, args.rate)),
                asyncio.ensure_future(traffic.ws_churn(session, args.ws_per_s)),
                asyncio.ensure_future(traffic.hostile(args.hostile_per_s)),
            ]
            revoke_every = args.duration / (len(doomed) + 1)
            next_revoke = revoke_every
            try:
                samples.append(await sample(stack, metrics_url, redis, t0))
                while (now := time.monotonic() - t0) < args.duration:
                    await asyncio.sleep(min(args.sample_every, args.duration - now))
                    if doomed and time.monotonic() - t0 >= next_revoke:
                        key, key_id = doomed.pop()
                        await revoke(stack, key_id)
                        traffic.revoked.append(key)
                        traffic.keys.remove(key)
                        next_revoke += revoke_every
                    samples.append(await sample(stack, metrics_url, redis, t0))
                    s = samples[-1]
                    log(
                        f"t={s['t_s']:.0f}s rss/worker {s['rss_mib_per_worker']:.1f} MiB, "
                        f"fds {s['fds']}, conns {s['connections']:g}, cache "
                        f"{s['cache_mib']:.1f} MiB, redis {s['redis_used_mib']:.1f} MiB"
                    )
            finally:
                traffic.stop.set()
                await asyncio.wait(loops, timeout=20)
                await redis.aclose()
        return _report(args, env, samples, traffic)


def _report(
    args: argparse.Namespace, env: Env, samples: list[dict[str, Any]], traffic: Traffic
) -> dict[str, Any]:
    report = base_report("soak", SOAK, args, env)
    report["samples"] = samples
    warmup = args.warmup if args.warmup is not None else 0.4 * args.duration
    report["warmup_s"] = warmup
    if samples:  # bsc only: one network's cache per worker
        report["cache_bound_mib"] = args.cache_max_bytes * len(samples[-1]["workers"]) / 2**20
    report["outcomes"] = dict(sorted(traffic.kinds.items()))
    after = [s for s in samples if s["t_s"] >= warmup]
    slopes = {
        name: slope_per_min([(s["t_s"], float(s[name])) for s in after]) for name in SLOPE_LIMITS
    }
    report["slopes_per_min"] = slopes
    for name, value in slopes.items():
        report["figures"][f"{name} slope after warm-up (per min)"] = (
            "n/a" if value is None else f"{value:+.3f}"
        )
    if samples:
        last = samples[-1]
        for name in ("rss_mib_per_worker", "fds", "cache_mib", "cache_entries", "redis_used_mib"):
            report["figures"][f"{name} at the end"] = last[name]
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        workers = max(1, len(last["workers"]))
        cache_grew = (last["cache_mib"] - first["cache_mib"]) / workers
        rss_grew = last["rss_mib_per_worker"] - first["rss_mib_per_worker"]
        report["figures"]["RSS growth per MiB the cache counts (per worker)"] = (
            round(rss_grew / cache_grew, 2) if cache_grew > 0.1 else "n/a"
        )
    answered = sum(c for k, c in traffic.kinds.items() if k.split()[-1].isdigit())
    report["figures"]["HTTP answers"] = answered
    report["figures"]["HTTP answers per second"] = round(answered / max(args.duration, 1), 1)
    checks = []
    for name, limit in SLOPE_LIMITS.items():
        value = slopes[name]
        checks.append(
            v.check(
                f"{name} flat after warm-up",
                value is not None and value <= limit,
                "too few samples after the warm-up"
                if value is None
                else f"{value:+.3f}/min (allowed {limit:g}/min)",
            )
        )
    checks.append(
        v.check(
            "no 500, no 5xx but 502/503/504, JSON-RPC bodies, ids kept",
            not traffic.bad,
            ", ".join(f"{k}: {c}" for k, c in traffic.bad.items()) or "none",
        )
    )
    start_workers = samples[0]["workers"] if samples else []
    end_workers = samples[-1]["workers"] if samples else []
    checks.append(
        v.check(
            "no worker restarted",
            start_workers == end_workers,
            f"workers {start_workers} -> {end_workers}",
        )
    )
    return finish(report, checks)
