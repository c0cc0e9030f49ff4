"""Filters kept by the gateway under load: what one poll costs next to an eth_getLogs.

Many keys each keep one filter (``eth_newFilter``) and poll it every 4 s
(ethers' default interval), each key at its own offset, beside plain traffic
(``eth_blockNumber`` at ``--rate``). The same keys then poll ``eth_getLogs``
over the same span instead (the blocks since their last poll: the stack's
mock nodes mine every 3 s), and a third phase runs the plain traffic alone.
Each phase reads the gateway's CPU (its process tree, ``/proc``) and Redis's
(``INFO cpu``, ``INFO commandstats`` calls) before and after; the plain-only
phase is subtracted, so the figures are per poll: gateway CPU µs, Redis CPU
µs and Redis commands, for a filter poll and for the eth_getLogs it stands
for. Needs the local stack (it reads process CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis

from bench import verdicts as v
from bench.scenarios.common import base_report, environment, finish, log, prefix_of
from bench.stack import BENCH_PLAN

FILTERS = (
    "Many keys each keep a filter polled every 4 s (ethers' default) beside plain traffic: "
    "gateway CPU, Redis CPU and Redis commands per poll, against the same keys polling "
    "eth_getLogs over the same span, with the plain-traffic-only cost taken out."
)
POLL_S = 4.0  # ethers' JsonRpcProvider polling interval


async def _redis_cost(client: aioredis.Redis) -> tuple[float, int]:
    """(Redis CPU seconds, commands processed) so far."""
    cpu = await client.info("cpu")
    stats = await client.info("stats")
    return (
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        int(stats["total_commands_processed"]),
    )


async def _phase(
    name: str,
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    url: str,
    keys: list[str],
    polls: dict[str, Any] | None,
    gateway_cpu: Any,
    redis: aioredis.Redis,
) -> dict[str, float]:
    """One phase of ``args.duration`` seconds: plain traffic, plus the keys' polls."""
    stop = time.monotonic() + args.duration
    counts = {"polls": 0, "plain": 0, "errors": 0}

    async def post(key: str, body: dict[str, Any]) -> Any:
        async with session.post(f"{url}/{key}", data=orjson.dumps(body)) as resp:
            answer = orjson.loads(await resp.read())
        if "error" in answer:
            counts["errors"] += 1
        return answer.get("result")

    async def plain() -> None:
        interval = 1.0 / max(args.rate, 0.001)
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}
        next_at = time.monotonic()
        while next_at < stop:
            await post(keys[0], body)
            counts["plain"] += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def poller(key: str, state: dict[str, Any]) -> None:
        await asyncio.sleep(random.uniform(0, POLL_S))
        while time.monotonic() < stop:
            started = time.monotonic()
            # Both kinds ask for the head first, as ethers does before each poll.
            head = int(await post(key, _call("eth_blockNumber", [])), 16)
            if state["kind"] == "filter":
                body = {"method": "eth_getFilterChanges", "params": [state["id"]]}
            else:  # the eth_getLogs a filter poll stands for: the blocks since the last one
                span = {"fromBlock": hex(state.get("next", head)), "toBlock": hex(head)}
                body = {"method": "eth_getLogs", "params": [{"address": state["addr"], **span}]}
                state["next"] = head + 1
            await post(key, {"jsonrpc": "2.0", "id": 1, **body})
            counts["polls"] += 1
            await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - started)))

    cpu0, (rcpu0, cmds0) = gateway_cpu(), await _redis_cost(redis)
    tasks = [asyncio.create_task(plain())]
    if polls is not None:
        tasks += [asyncio.create_task(poller(k, polls[k])) for k in keys]
    await asyncio.gather(*tasks)
    cpu1, (rcpu1, cmds1) = gateway_cpu(), await _redis_cost(redis)
    out = {
        **{k: float(n) for k, n in counts.items()},
        "gateway_cpu_s": cpu1 - cpu0,
        "redis_cpu_s": rcpu1 - rcpu0,
        "redis_commands": float(cmds1 - cmds0),
    }
    log(f"{name}: {out}")
    return out


def _call(method: str, params: list[Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def filters(args: argparse.Namespace) -> dict[str, Any]:
    if args.target:
        raise SystemExit("bench: filters needs the local stack (it reads process CPU)")
    async with environment(args) as env:
        stack = env.stack
        assert stack is not None and stack.gateway is not None
        keys = [k for k, _ in await env.keys(args.keys, args.plan or BENCH_PLAN)]
        url = env.gateway_url + prefix_of(args)
        redis = aioredis.Redis.from_url(stack.redis_url)
        addr = "0x" + "22" * 20
        results: dict[str, dict[str, float]] = {}
        connector = aiohttp.TCPConnector(limit=args.connections)
        async with aiohttp.ClientSession(
            connector=connector, headers={"Content-Type": "application/json"}
        ) as session:
            polls: dict[str, Any] = {}
            for key in keys:
                body = orjson.dumps(_call("eth_newFilter", [{"address": addr}]))
                async with session.post(f"{url}/{key}", data=body) as resp:
                    polls[key] = {"kind": "filter", "id": orjson.loads(await resp.read())["result"]}
            getlogs = {k: {"kind": "logs", "addr": addr} for k in keys}
            cpu = stack.gateway.cpu_seconds
            for name, state in (("filter polls", polls), ("eth_getLogs", getlogs), ("plain", None)):
                results[name] = await _phase(name, args, session, url, keys, state, cpu, redis)
        await redis.aclose()
    report = base_report("filters", FILTERS, args, env)
    plain = results["plain"]
    figures = report["figures"]
    per: dict[str, dict[str, float]] = {}
    for name in ("filter polls", "eth_getLogs"):
        r = results[name]
        n = max(r["polls"], 1.0)
        # the plain traffic's share, scaled to this phase's plain calls
        share = r["plain"] / max(plain["plain"], 1.0)
        per[name] = {
            "gateway_us": (r["gateway_cpu_s"] - plain["gateway_cpu_s"] * share) / n * 1e6,
            "redis_us": (r["redis_cpu_s"] - plain["redis_cpu_s"] * share) / n * 1e6,
            "redis_cmds": (r["redis_commands"] - plain["redis_commands"] * share) / n,
        }
        figures[f"{name}: polls (errors)"] = f"{r['polls']:,.0f} ({r['errors']:,.0f})"
        figures[f"{name}: gateway CPU per poll"] = f"{per[name]['gateway_us']:,.0f} µs"
        figures[f"{name}: Redis CPU per poll"] = f"{per[name]['redis_us']:,.1f} µs"
        figures[f"{name}: Redis commands per poll"] = f"{per[name]['redis_cmds']:.2f}"
    figures["plain traffic"] = f"{plain['plain']:,.0f} eth_blockNumber in {args.duration:.0f} s"
    checks = [
        v.check(
            "no errors",
            all(results[n]["errors"] == 0 for n in results),
            ", ".join(f"{n}: {results[n]['errors']:.0f}" for n in results),
        ),
        v.check(
            "every key polled",
            all(results[n]["polls"] >= len(keys) for n in ("filter polls", "eth_getLogs")),
            f"{len(keys)} keys",
        ),
    ]
    report["notes"].append(
        "A filter poll is eth_getFilterChanges: the gateway reads the filter (HGETALL), "
        "scans the blocks since the last poll with eth_getLogs through its cache and node "
        "path, and writes progress back with one compare-and-set script. In both phases each "
        "poll is preceded by the client's eth_blockNumber (as ethers polls), so the "
        "difference between the two is getFilterChanges against getLogs alone."
    )
    return finish(report, checks)
