"""Shared scenario plumbing: where the gateway is, keys, load specs, events, reports."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import secrets
import shlex
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench import partcpu
from bench import report as rpt
from bench import verdicts as v
from bench.loadgen import LoadResult, LoadRun, LoadSpec
from bench.redact import redact_text
from bench.stack import (
    KNOWN_PLANS,
    ManagedProcess,
    Stack,
    StackOptions,
    parse_cli_json,
    run_cli,
)
from bench.workload import DEFAULT_METHODS, Endpoint, make_requests

KEYS_PER_ACCOUNT = 20  # the gateway's default per-account key ceiling


def log(msg: str) -> None:
    print(f"bench: {redact_text(msg)}", file=sys.stderr, flush=True)


# ---- environment: a local stack or an existing deployment ---------------------


@dataclass
class Env:
    """Where the gateway is, and how to make and revoke keys for it."""

    args: argparse.Namespace
    stack: Stack | None
    gateway_url: str

    @property
    def local(self) -> bool:
        return self.stack is not None

    async def cli(self, *cli_args: str, stdin: str | None = None) -> str:
        if self.stack is not None:
            return await self.stack.cli(*cli_args, stdin=stdin)
        return await run_cli(shlex.split(self.args.gateway_cmd), list(cli_args), None, stdin)

    async def keys(self, count: int, plan: str) -> list[tuple[str, str | None]]:
        """``count`` keys as (key, key id): given ones, or fresh ones from the CLI."""
        given = list(self.args.key or [])  # --key and --keys-file, read by the CLI
        if given and not self.local and not self.args.create_keys:
            if len(given) < count:
                raise SystemExit(f"bench: need {count} keys, got {len(given)} (--key/--keys-file)")
            return [(k, None) for k in given[:count]]
        if not self.local and not self.args.create_keys:
            raise SystemExit(
                "bench: --target needs --key/--keys-file, or --create-keys to make keys "
                "with the operator CLI (it reads GATEWAY_CONFIG / GATEWAY_REDIS_URL)"
            )
        return await self.create_keys(count, plan)

    async def create_keys(self, count: int, plan: str) -> list[tuple[str, str | None]]:
        run_id = secrets.token_hex(4)
        n_accounts = math.ceil(count / KEYS_PER_ACCOUNT)
        emails = [f"bench-{run_id}-{j}@example.com" for j in range(n_accounts)]
        password = secrets.token_urlsafe(16)
        gate = asyncio.Semaphore(4)
        log(f"creating {count} key(s) on plan {plan!r} with the operator CLI")

        async def account(email: str) -> None:
            async with gate:
                await self.cli(
                    "accounts", "create", email, "--plan", plan, "--json", stdin=password + "\n"
                )

        async def key(i: int) -> tuple[str, str | None]:
            async with gate:
                out = await self.cli(
                    "keys", "create", "--account", emails[i // KEYS_PER_ACCOUNT],
                    "--name", f"bench-{i}", "--json",
                )  # fmt: skip
            obj = parse_cli_json(out)
            return str(obj["key"]), str(obj["id"]) if "id" in obj else None

        await asyncio.gather(*(account(e) for e in emails))
        return list(await asyncio.gather(*(key(i) for i in range(count))))

    async def revoke(self, key_id: str) -> None:
        await self.cli("keys", "revoke", key_id)


@contextlib.asynccontextmanager
async def environment(
    args: argparse.Namespace, *, proxy: bool = False, bsc_nodes: int = 2
) -> AsyncIterator[Env]:
    if args.target:
        yield Env(args, None, args.target.rstrip("/"))
        return
    opts = StackOptions(
        bsc_nodes=bsc_nodes,
        node_latency_ms=args.node_latency * 1000.0,
        node_jitter_ms=args.node_jitter * 1000.0,
        gateway_workers=args.workers,
        door=getattr(args, "door", "lean"),
        gateway_cmd=tuple(shlex.split(args.gateway_cmd)),
        gateway_wrap=tuple(shlex.split(getattr(args, "gateway_wrap", None) or "")),
        pin=not args.no_pin,
        proxy=proxy,
        keep_dir=args.keep_stack_dir,
        extra_toml=f'[admission]\nmode = "{getattr(args, "admission", "lease")}"\n',
    )
    log("starting a local stack (redis, mock nodes, gateway)")
    async with Stack.start(opts) as stack:
        assert stack.gateway is not None
        log(f"stack up in {stack.workdir}; {stack.cpus.describe()}")
        yield Env(args, stack, stack.gateway.url)


# ---- common pieces -----------------------------------------------------------


def prefix_of(args: argparse.Namespace) -> str:
    return str(args.prefix or f"/{args.network}")


def load_spec(
    args: argparse.Namespace,
    env: Env,
    url: str,
    keys: list[str],
    *,
    rate: float | None = None,
    duration: float | None = None,
) -> LoadSpec:
    endpoint = Endpoint.from_url(url, prefix_of(args))
    requests, key_of = make_requests(
        endpoint,
        keys,
        key_in=args.key_in,
        methods=tuple(args.method or DEFAULT_METHODS),
        batch=args.batch,
    )
    offered = 0.0 if args.closed else (args.rate if rate is None else rate)
    return LoadSpec(
        host=endpoint.host,
        port=endpoint.port,
        requests=requests,
        keys_of=key_of,
        duration_s=args.duration if duration is None else duration,
        rate=offered,
        connections=max(args.connections, args.procs),
        processes=args.procs,
        timeout_s=args.timeout,
        cpus=env.stack.cpus.others if env.stack is not None else None,
    )


def plan_limits(args: argparse.Namespace, plan: str) -> tuple[float, int]:
    rate, burst = KNOWN_PLANS.get(plan, (0.0, 0))
    rate = args.plan_rate if args.plan_rate is not None else rate
    burst = args.plan_burst if args.plan_burst is not None else burst
    if rate <= 0 or burst <= 0:
        raise SystemExit(f"bench: unknown plan {plan!r}: give --plan-rate and --plan-burst")
    return rate, burst


async def run_with_events(
    spec: LoadSpec,
    events: list[tuple[float, str, Callable[[], Awaitable[None]]]],
    *,
    progress: bool,
    label: str,
    stack: Stack | None = None,
) -> tuple[LoadResult, list[dict[str, Any]]]:
    """Run load; at each (t seconds after start, label, action) run the action.

    Each event is logged twice, when the action starts and when it returns,
    with times relative to the load start.  With the local ``stack`` the CPU
    of each of its parts over the run is attached to the result, so the
    report can name the part at its limit.
    """
    before = await partcpu.snapshot(stack)
    run = LoadRun(spec, progress=progress, label=label)
    task = asyncio.ensure_future(run.run())
    log_: list[dict[str, Any]] = []
    try:
        start = await asyncio.shield(run.started)
        for at, what, action in events:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            t0 = time.monotonic()
            await action()
            t1 = time.monotonic()
            log_.append({"t_s": t0 - start, "what": f"{what} (start)", "abs": t0})
            log_.append({"t_s": t1 - start, "what": f"{what} (done)", "abs": t1})
        result = await task
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    attach_parts(result, before, await partcpu.snapshot(stack))
    return result, log_


def attach_parts(
    result: LoadResult, before: partcpu.PartsSnapshot, after: partcpu.PartsSnapshot
) -> None:
    """Store the CPU each part used between two snapshots on ``result``."""
    result.parts_cpu_s = v.counter_delta(before.cpu_s, after.cpu_s)
    result.parts_cpus = {k: after.cpus.get(k) for k in result.parts_cpu_s}
    result.cpu_ticks = v.ticks_delta(before.cpu_ticks, after.cpu_ticks)
    if before.redis_cpu_s is not None and after.redis_cpu_s is not None:
        used = after.redis_cpu_s - before.redis_cpu_s
        result.redis_info_cpu_s = used if used >= 0 else after.redis_cpu_s  # restarted


def cpu_of(proc: ManagedProcess | None) -> float | None:
    return proc.cpu_seconds() if proc is not None and proc.alive else None


def delta(after: float | None, before: float | None) -> float | None:
    return after - before if after is not None and before is not None else None


def total_or_none(values: list[float | None]) -> float | None:
    """Sum, or None if any part is unknown (a process we do not own)."""
    known = [x for x in values if x is not None]
    return sum(known) if values and len(known) == len(values) else None


def base_report(
    scenario: str, description: str, args: argparse.Namespace, env: Env
) -> dict[str, Any]:
    params = {k: v_ for k, v_ in vars(args).items() if k not in ("func", "key")}
    report = rpt.new_report(scenario, description, params)
    report["target"] = env.gateway_url if not env.local else "local stack"
    if env.stack is not None:
        report["cpu_layout"] = env.stack.cpus.describe()
        report["door"] = env.stack.options.door  # the gateway's server.door
    return report


def finish(report: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    report["verdict"] = v.verdict(checks)
    report["notes"] += rpt.generator_notes(report["targets"])
    return report
