"""A realistic dapp read mix from many keys: what the cache and coalescing save.

The mix (per 100 calls): head polling (``eth_blockNumber`` 20), ``eth_chainId``
5, ``eth_call`` at latest over 32 (contract, holder) pairs 25, ``eth_getBalance``
at latest over 50 addresses 15, the latest block 10, recent numbered blocks 10,
small numbered ``eth_getLogs`` ranges 5, ``eth_gasPrice`` 5, old-state reads
(``eth_getBalance`` some 1,000 blocks back) 3, and wide ``eth_getLogs`` ranges
(5,000 blocks) 2. Every key sends the same mix in its own shuffled order, as
many browser tabs of one dapp do.

The two bsc nodes are written as a node table: ``archive`` (keeps every
state) and ``full`` (128 blocks), both taking at most 2,000 blocks of logs,
so old state goes to the archive node alone and each wide range is split
into three chunks. The report gives node calls per client call by node.

The gateway and the bare pass-through proxy (bench/baseline_proxy.py, no key
check, no cache) get the same bodies in the same run, closed loop, in
interleaved phases (``--rounds``, A B A B by default) so that the machine's
drift falls on both. The gateway's ``/metrics`` (on its own port) give the
node calls (upstream attempts), cache hits and misses by method, and
coalesced calls; Redis's ``INFO commandstats`` around each gateway phase
gives Redis's time per admitted call by command (scripts, usage and insight
sums, call logs); ``/proc`` gives the gateway's peak RSS. Receipts are not in the mix: the
stack's mock node does not serve them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import random
import re
import shlex
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from bench import report as rpt
from bench import verdicts as v
from bench.client import build_request
from bench.loadgen import LoadResult, LoadSpec
from bench.partcpu import redis_commandstats
from bench.scenarios.common import (
    Env,
    base_report,
    cpu_of,
    delta,
    finish,
    log,
    prefix_of,
    run_with_events,
    total_or_none,
)
from bench.stack import BENCH_PLAN, Stack, StackOptions, free_port, process_tree
from bench.workload import Endpoint

MIX = (
    "A realistic dapp read mix (head polling, eth_call, balances, latest and recent blocks, "
    "small eth_getLogs, gas price) from many keys, against the gateway (cache and "
    "coalescing on) and the bare proxy in the same run: node calls per client call, cache "
    "hit rate by method, coalesced share, throughput ratio, peak RSS."
)

_START = 1_000_000  # the stack's mock node starts its chain here and only moves up
_CONTRACTS = ["0x" + f"{c:02x}" * 20 for c in (0x10, 0x20, 0x30, 0x40)]
_HOLDERS = ["0x" + f"{h:02x}" * 20 for h in range(0x50, 0x58)]
_ADDRESSES = ["0x" + f"{a:040x}" for a in range(1, 51)]


def mix_calls(rng: random.Random) -> list[tuple[str, list[Any]]]:
    """One key's 100 calls in a shuffled order (method, params)."""
    calls: list[tuple[str, list[Any]]] = []
    calls += [("eth_blockNumber", [])] * 20
    calls += [("eth_chainId", [])] * 5
    for _ in range(25):
        data = "0x70a08231" + "00" * 12 + rng.choice(_HOLDERS)[2:]
        calls.append(("eth_call", [{"to": rng.choice(_CONTRACTS), "data": data}, "latest"]))
    calls += [("eth_getBalance", [rng.choice(_ADDRESSES), "latest"]) for _ in range(15)]
    calls += [("eth_getBlockByNumber", ["latest", False])] * 10
    calls += [("eth_getBlockByNumber", [hex(_START - rng.randrange(20)), False]) for _ in range(10)]
    for _ in range(5):
        low = _START - 100 + rng.randrange(10) * 10
        calls.append(("eth_getLogs", [{"fromBlock": hex(low), "toBlock": hex(low + 9)}]))
    calls += [("eth_gasPrice", [])] * 5
    # history: state the archive node alone keeps, and ranges split into node-sized chunks
    for _ in range(3):
        old = hex(_START - 1_000 - rng.randrange(50))
        calls.append(("eth_getBalance", [rng.choice(_ADDRESSES), old]))
    for _ in range(2):
        low = _START - 6_000 - rng.randrange(4) * 1_000
        wide = {"fromBlock": hex(low), "toBlock": hex(low + 4_999)}
        calls.append(("eth_getLogs", [wide]))
    rng.shuffle(calls)
    return calls


def build_mix(
    endpoint: Endpoint, keys: list[str], seed: int
) -> tuple[tuple[bytes, ...], tuple[int, ...], dict[str, int]]:
    """Request templates interleaving the keys, the key index of each, and calls by method."""
    rng = random.Random(seed)
    per_key = [mix_calls(rng) for _ in range(max(1, len(keys)))]
    requests: list[bytes] = []
    key_of: list[int] = []
    by_method: dict[str, int] = {}
    for i in range(100):
        for k, calls in enumerate(per_key):
            method, params = calls[i]
            body = orjson.dumps({"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params})
            path = f"{endpoint.prefix}/{keys[k]}" if keys else endpoint.prefix
            requests.append(build_request(endpoint.host, endpoint.port, path, body))
            key_of.append(k)
            by_method[method] = by_method.get(method, 0) + 1
    return tuple(requests), tuple(key_of), by_method


_SAMPLE = re.compile(r"^([a-zA-Z_:]+)\{([^}]*)\} ([0-9.e+-]+)$", re.M)


async def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        text = await resp.text()
    out = []
    for name, labels, value in _SAMPLE.findall(text):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out.append((name, pairs, float(value)))
    return out


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **want: str) -> float:
    return sum(
        val
        for n, labels, val in samples
        if n == name and all(labels.get(k) == w for k, w in want.items())
    )


def peak_rss_mib(pid: int) -> float:
    """The largest peak RSS (VmHWM) of ``pid`` and its descendants (the workers)."""
    peak = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError), open(f"/proc/{p}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
    return peak / 1024


async def staleness(gateway_url: str, node_urls: list[str]) -> dict[str, dict[int, int]]:
    """Blocks behind the freshest node of each head answer, sampled during the load.

    Every 50 ms one ``eth_blockNumber`` and one ``eth_getBlockByNumber("latest")``
    go to the gateway; as each answer arrives every node of the network is
    asked its ``eth_blockNumber`` directly, and the answer's lag is the
    highest of those minus the answered number. Runs
    until cancelled; returns {method: {lag: count}}.
    """
    lags: dict[str, dict[int, int]] = {"eth_blockNumber": {}, "latest": {}}
    calls: tuple[tuple[str, str, list[Any]], ...] = (
        ("eth_blockNumber", "eth_blockNumber", []),
        ("latest", "eth_getBlockByNumber", ["latest", False]),
    )

    async def ask(session: aiohttp.ClientSession, url: str, method: str, params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with session.post(url, json=body) as resp:
            return (await resp.json(content_type=None)).get("result")

    with contextlib.suppress(asyncio.CancelledError):
        async with aiohttp.ClientSession() as session:
            while True:
                for label, method, params in calls:
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                        result = await ask(session, gateway_url, method, params)
                        heads = await asyncio.gather(
                            *(ask(session, u, "eth_blockNumber", []) for u in node_urls)
                        )
                        if isinstance(result, dict):
                            result = result.get("number")
                        if isinstance(result, str) and heads:
                            lag = max(int(h, 16) for h in heads) - int(result, 16)
                            lags[label][lag] = lags[label].get(lag, 0) + 1
                await asyncio.sleep(0.05)
    return lags


def staleness_figures(
    lags: Mapping[str, Mapping[int, int]], block_time_s: float, after: list[Any]
) -> dict[str, str]:
    """The staleness distribution and the head's promise (>= 95 % within 1 block, none > 2)."""
    out: dict[str, str] = {}
    ws = total(after, "gateway_upstream_ws_heads", network="bsc")
    out["head source (bsc)"] = (
        f"newHeads on {ws:.0f} node(s)" if ws else "polling (the mock nodes speak no WebSocket)"
    )
    for label, counts in lags.items():
        n = sum(counts.values())
        if not n:
            out[f"staleness {label}"] = "no samples"
            continue
        within = sum(c for lag, c in counts.items() if lag <= 1) / n
        dist = ", ".join(f"{lag}: {c}" for lag, c in sorted(counts.items()))
        out[f"staleness {label} (blocks behind the node at {block_time_s:g}s blocks)"] = (
            f"{{{dist}}}; {within:.1%} within 1 block, max {max(counts)} (target >= 95 %, max 2)"
        )
    return out


def redis_split(commands: dict[str, tuple[int, int]], admitted: int) -> dict[str, str]:
    """Redis's time per admitted call by command (``INFO commandstats``), largest first.

    ``evalsha`` is the scripts (admission and its lease refills, the shared
    cache's writes); ``hincrby`` the usage and insight sums flushed in the
    background; ``xadd`` the per-key call logs. A command a script runs is
    also inside the script's time, so the rows overlap.
    """
    if not admitted or not commands:
        return {"Redis time by command": "unknown (no admitted calls or no INFO commandstats)"}
    out: dict[str, str] = {}
    for cmd, (calls, usec) in sorted(commands.items(), key=lambda kv: -kv[1][1]):
        out[f"Redis {cmd} per admitted call"] = (
            f"{usec / admitted:.2f} µs ({calls / admitted:.3f} calls)"
        )
    return out


def node_latency(args: argparse.Namespace) -> tuple[float, float]:
    """The mock nodes' (latency, uniform jitter) in ms: ``--node-delay`` or the plain options.

    ``--node-delay 5ms+-3ms`` is a latency of 2 ms plus a jitter uniform in
    0..6 ms: every call takes 2 to 8 ms, 5 ms on average.
    """
    delay = getattr(args, "node_delay", None)
    if delay is not None:
        mean, spread = delay
        return (mean - spread) * 1000.0, 2 * spread * 1000.0
    return args.node_latency * 1000.0, args.node_jitter * 1000.0


@contextlib.asynccontextmanager
async def _stack(args: argparse.Namespace, metrics_port: int) -> AsyncIterator[Env]:
    latency_ms, jitter_ms = node_latency(args)
    opts = StackOptions(
        bsc_nodes=2,
        node_latency_ms=latency_ms,
        node_jitter_ms=jitter_ms,
        gateway_workers=args.workers,
        door=args.door,
        gateway_cmd=tuple(shlex.split(args.gateway_cmd)),
        pin=not args.no_pin,
        proxy=True,
        keep_dir=args.keep_stack_dir,
        metrics_port=metrics_port,
        node_block_time_s=args.block_time,
        bsc_node_fields=(
            {"name": "archive", "archive": True, "max_logs_range": 2_000},
            {"name": "full", "max_logs_range": 2_000},
        ),
    )
    log("starting a local stack (redis, mock nodes, gateway, bare proxy)")
    async with Stack.start(opts) as stack:
        assert stack.gateway is not None
        yield Env(args, stack, stack.gateway.url)


async def mix(args: argparse.Namespace) -> dict[str, Any]:
    if args.target:
        raise SystemExit("bench: mix needs the local stack (it reads the gateway's metrics)")
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    async with _stack(args, metrics_port) as env:
        stack = env.stack
        assert stack is not None and stack.gateway is not None and stack.proxy is not None
        keys = [k for k, _ in await env.keys(args.keys, BENCH_PLAN)]
        results: dict[str, list[LoadResult]] = {"gateway": [], "proxy": []}
        cpu: dict[str, list[float | None]] = {"gateway": [], "proxy": []}
        lags: dict[str, collections.Counter[int]] = {}
        scrapes: list[tuple[list[Any], list[Any]]] = []  # gateway metrics around each phase
        commands: dict[str, tuple[int, int]] = {}  # Redis (calls, usec) in the gateway phases
        endpoints = {
            "gateway": Endpoint.from_url(env.gateway_url, prefix_of(args)),
            "proxy": Endpoint.from_url(stack.proxy.url, prefix_of(args)),
        }
        built = {
            name: build_mix(endpoint, keys if name == "gateway" else [], args.seed)
            for name, endpoint in endpoints.items()
        }
        counts = built["gateway"][2]
        for r in range(args.rounds):  # interleaved: A B A B, so the machine's drift cancels
            for name, endpoint in endpoints.items():
                requests, key_of, _ = built[name]
                spec = LoadSpec(
                    host=endpoint.host,
                    port=endpoint.port,
                    requests=requests,
                    keys_of=key_of,
                    duration_s=args.duration,
                    rate=0.0,
                    connections=max(args.connections, args.procs),
                    processes=args.procs,
                    timeout_s=args.timeout,
                    cpus=stack.cpus.others,
                )
                sampler = None
                if name == "gateway":
                    before = await scrape(metrics_url)
                    stats_before = await redis_commandstats(stack.redis_port)
                    node_urls = [n.url for n in stack.nodes.get(args.network, [])]
                    gw_url = f"{env.gateway_url}{prefix_of(args)}/{keys[0]}"
                    sampler = asyncio.create_task(staleness(gw_url, node_urls))
                proc = stack.gateway if name == "gateway" else stack.proxy
                cpu_before = cpu_of(proc)
                label = f"{name} {r + 1}/{args.rounds}" if args.rounds > 1 else name
                res, _ = await run_with_events(
                    spec, [], progress=not args.quiet, label=label, stack=stack
                )
                cpu[name].append(delta(cpu_of(proc), cpu_before))
                results[name].append(res)
                log(
                    f"{label}: {res.completed / res.duration_s:,.0f} req/s, kinds {dict(res.kinds)}"
                )
                if sampler is not None:
                    sampler.cancel()
                    for label_, seen in (await sampler).items():
                        lags.setdefault(label_, collections.Counter()).update(seen)
                    # intel metrics are synced once per probe (1 s); the phase's usage
                    # and insight sums are flushed to Redis in this wait too
                    await asyncio.sleep(2.5)
                    scrapes.append((before, await scrape(metrics_url)))
                    stats = await redis_commandstats(stack.redis_port)
                    for cmd, (ran, usec) in v.commands_delta(stats_before, stats).items():
                        calls0, usec0 = commands.get(cmd, (0, 0))
                        commands[cmd] = (calls0 + ran, usec0 + usec)
        after = scrapes[-1][1]
        rss = peak_rss_mib(stack.gateway.pid)
        report = base_report("mix", MIX, args, env)
        for name, runs in results.items():
            report["targets"][name] = rpt.summarize(runs, server_cpu_s=total_or_none(cpu[name]))
        report["ratios"]["gateway/proxy"] = v.side_by_side_ratios(
            report["targets"]["gateway"], report["targets"]["proxy"]
        )

        def grew(name: str, **labels: str) -> float:
            return sum(total(a, name, **labels) - total(b, name, **labels) for b, a in scrapes)

        client_calls = sum(res.completed for res in results["gateway"])
        node_calls = grew("gateway_upstream_results_total")
        coalesced = grew("gateway_coalesced_calls_total")
        per_call = node_calls / client_calls if client_calls else float("nan")
        figures = report["figures"]
        if args.rounds > 1:
            for name in results:
                tp = report["targets"][name]["round_throughput_rps"]
                figures[f"{name} throughput spread over rounds (min/max)"] = (
                    f"{min(tp):,.0f} / {max(tp):,.0f} req/s"
                )
        figures.update(redis_split(commands, report["targets"]["gateway"].get("admitted", 0)))
        figures["client calls answered (gateway)"] = f"{client_calls:,}"
        figures["node calls (upstream attempts)"] = f"{node_calls:,.0f}"
        most = args.max_node_calls
        figures["node calls per client call"] = f"{per_call:.3f} (target <= {most:g})"
        for node in sorted({labels["node"] for n, labels, _ in after if "node" in labels}):
            calls = grew("gateway_upstream_results_total", node=node)
            share = calls / client_calls if client_calls else float("nan")
            figures[f"node calls per client call, node {node}"] = f"{share:.3f}"
        latency_ms, jitter_ms = node_latency(args)
        figures["mock node latency"] = (
            f"{latency_ms:g} ms + uniform 0..{jitter_ms:g} ms"
            f" (mean {latency_ms + jitter_ms / 2:g} ms)"
        )
        for name in ("gateway", "proxy"):
            us = report["targets"][name].get("server_cpu_us_per_req")
            figures[f"{name} CPU per answered call"] = f"{us:.1f} µs" if us else "unknown"
        figures["coalesced share of client calls"] = f"{coalesced / max(1, client_calls):.1%}"
        for method in sorted(counts):
            hits = grew("gateway_cache_lookups_total", method=method, result="hit")
            misses = grew("gateway_cache_lookups_total", method=method, result="miss")
            rate = f"{hits / (hits + misses):.1%}" if hits + misses else "not cached"
            share = counts[method] / max(1, sum(counts.values()))
            figures[f"cache hit rate {method}"] = f"{rate} ({share:.0%} of the mix)"
        cache_bytes = total(after, "gateway_cache_bytes", network="bsc")
        figures["cache bytes at the end (bsc)"] = f"{cache_bytes / 1024:,.0f} KiB"
        figures["gateway peak RSS"] = f"{rss:,.1f} MiB"
        figures.update(staleness_figures(lags, args.block_time, after))
        gw, px = report["targets"]["gateway"], report["targets"]["proxy"]
        ratio = gw["throughput_rps"] / px["throughput_rps"] if px["throughput_rps"] else 0.0
        want = args.min_vs_proxy
        figures["throughput gateway / bare proxy"] = f"{ratio:.2f}x (target >= {want:g}x)"
        checks = [
            v.check(
                f"node calls per client call <= {args.max_node_calls:g}",
                per_call <= args.max_node_calls,
                f"{per_call:.3f}",
            ),
            v.check(f"throughput >= {want:g}x the bare proxy", ratio >= want, f"{ratio:.2f}x"),
            v.check(
                "cache within its byte budget",
                cache_bytes <= args.cache_max_bytes,
                f"{cache_bytes:,.0f} <= {args.cache_max_bytes:,} bytes",
            ),
            v.check(
                "no errors",
                gw["error_rate"] == 0,
                f"{gw['error_rate'] * 100:.3f}%: {gw['errors'] or 'none'}",
            ),
        ]
        return finish(report, checks)
