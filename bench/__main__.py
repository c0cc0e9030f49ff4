"""``python -m bench <scenario>``: run one load-test scenario and write its report.

Without ``--target`` a local stack is started (embedded Redis, mock nodes,
``gateway serve``), pinned so the server and the load generator do not share a
CPU; with ``--target URL`` the scenario runs against an existing deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:  # the bench extra: without it, say how to install it instead of a traceback
    import hdrh  # noqa: F401
    import matplotlib  # noqa: F401
    import tqdm  # noqa: F401
except ModuleNotFoundError as _missing:
    sys.exit(
        f"python -m bench needs the bench extra ({_missing.name} is not installed): "
        "pip install 'rpc-gateway[bench]' (from a checkout: pip install '.[bench]')"
    )

from bench.redact import redact_report, redact_text, secrets_of
from bench.report import render_markdown, write_outputs
from bench.scenarios import SCENARIOS
from bench.units import count_arg, duration_arg, fraction_arg, positive_arg, spread_arg

_EPILOG = """examples:
  python -m bench steady --rate 2000 --duration 10s
  python -m bench steady --closed --vs proxy,direct --rounds 3
  python -m bench burst --plan free
  python -m bench revoke --workers 2
  python -m bench steady --target https://rpc.example.com --key $KEY --rate 500
  python -m bench scale --max-workers 4 --connections 64
  python -m bench mix --keys 20 --duration 10s --node-delay 5ms+-3ms
  python -m bench soak --duration 10m
  python -m bench ws --sockets 10000 --procs 4   (own options: python -m bench ws --help)
See bench/README.md for the numbers measured on the reference machine."""

# Per-scenario defaults: (duration s, rate req/s) and extra options.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "steady": {"duration": 10.0, "rate": 1000.0},
    "burst": {"duration": 10.0, "rate": 0.0},
    "many-keys": {"duration": 10.0, "rate": 0.0},
    "revoke": {"duration": 8.0, "rate": 100.0},
    "node-failure": {"duration": 12.0, "rate": 500.0},
    "redis-restart": {"duration": 12.0, "rate": 300.0},
    "scale": {"duration": 5.0, "rate": 0.0},
    "mix": {"duration": 10.0, "rate": 0.0},
    "soak": {"duration": 600.0, "rate": 300.0},
    "filters": {"duration": 20.0, "rate": 50.0},
    "tx": {"duration": 5.0, "rate": 200.0},
}


_SHORT = {
    "steady": "constant-rate or max-throughput load; --vs for side-by-side baselines",
    "burst": "one key above its plan: admitted vs burst + rate*t, Retry-After",
    "many-keys": "many keys at once: each gets its own bucket's share",
    "revoke": "revoke a key under load: ms until the first 401",
    "node-failure": "kill or hang an upstream node under load",
    "redis-restart": "stop and restart Redis under load: fail closed, recover",
    "scale": "1..N gateway workers, closed loop: throughput vs the ideal line, CPU per part",
    "mix": "a dapp read mix from many keys: node calls per call, cache hits, vs the bare proxy",
    "soak": "minutes of mixed traffic, refusals, WebSocket churn, hostile clients: slopes",
    "filters": "many keys polling a filter every 4 s: CPU and Redis per poll vs eth_getLogs",
    "tx": "raw transactions broadcast to every node: tx/s, CPU added per tx over a plain call",
}


def _common(p: argparse.ArgumentParser, scenario: str) -> None:
    d = _DEFAULTS[scenario]
    where = p.add_argument_group("target")
    where.add_argument(
        "--target",
        metavar="URL",
        help="an existing gateway (http://host:port); default: start a local stack",
    )
    where.add_argument("--network", choices=("bsc", "opbnb"), default="bsc")
    where.add_argument("--prefix", help="path prefix if not /<network>")
    where.add_argument("--key", action="append", help="API key to use (repeatable)")
    where.add_argument("--keys-file", help="file with one API key per line")
    where.add_argument(
        "--create-keys",
        action="store_true",
        help="with --target: create fresh keys with the operator CLI (reads GATEWAY_CONFIG, "
        "GATEWAY_REDIS_URL like the server)",
    )
    where.add_argument("--key-in", choices=("path", "header"), default="path")
    where.add_argument("--plan", help="plan for created keys (scenario default otherwise)")
    where.add_argument(
        "--gateway-cmd",
        default=f"{shlex.quote(sys.executable)} -m gateway",
        help="how to run the gateway CLI (default: this python -m gateway)",
    )
    load = p.add_argument_group("load")
    load.add_argument(
        "--duration", type=duration_arg("s"), default=d["duration"], help="e.g. 10s, 2m"
    )
    load.add_argument(
        "--rate",
        type=float,
        default=d["rate"],
        help="open-loop arrivals per second (latency from the intended send time)",
    )
    load.add_argument(
        "--closed", action="store_true", help="closed loop: maximum throughput instead of a rate"
    )
    load.add_argument("--connections", type=int, default=64, help="keep-alive connections")
    load.add_argument("--procs", type=int, default=1, help="load-generator processes")
    load.add_argument("--timeout", type=duration_arg("s"), default=10.0, help="per request")
    load.add_argument("--method", action="append", help="JSON-RPC method (repeatable; mix)")
    load.add_argument("--batch", type=int, default=1, help="calls per request (batch if > 1)")
    stack = p.add_argument_group("local stack")
    stack.add_argument("--workers", type=int, default=1, help="gateway worker processes")
    stack.add_argument(
        "--door",
        choices=("app", "lean"),
        default="lean",
        help="the gateway's server.door: the lean door for RPC POSTs (default, as the "
        "gateway's), or the application for every path",
    )
    stack.add_argument(
        "--admission",
        choices=("lease", "exact"),
        default="lease",
        help="the gateway's admission.mode: leased slices (default) or one script call per request",
    )
    stack.add_argument(
        "--node-latency", type=duration_arg("ms"), default=0.0, help="mock node latency, e.g. 20ms"
    )
    stack.add_argument("--node-jitter", type=duration_arg("ms"), default=0.0)
    stack.add_argument(
        "--no-pin", action="store_true", help="do not pin the server and the generator to CPUs"
    )
    stack.add_argument("--keep-stack-dir", action="store_true", help="keep logs and config")
    stack.add_argument(
        "--gateway-wrap",
        metavar="CMD",
        help="run the gateway server under this command, e.g. 'valgrind --tool=callgrind "
        "--callgrind-out-file=/tmp/cg.%%p' (instruction counts, repeatable on a busy machine)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    out.add_argument("--out-dir", default="bench-results", help="write .json/.md/.png here")
    out.add_argument("--out-json", metavar="FILE")
    out.add_argument("--out-md", metavar="FILE")
    out.add_argument("--plot", metavar="FILE", help="PNG latency plot path")
    out.add_argument("--no-plot", action="store_true")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def _plan_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan-rate", type=float, help="plan rate (req/s) if not a known plan")
    p.add_argument("--plan-burst", type=int, help="plan burst if not a known plan")


def _outage(p: argparse.ArgumentParser, modes: tuple[str, ...]) -> None:
    p.add_argument("--mode", choices=modes, default=modes[0])
    p.add_argument("--fail-at", type=duration_arg("s"), default=3.0, help="after load start")
    p.add_argument("--outage", type=duration_arg("s"), default=3.0, help="how long it stays down")
    p.add_argument("--fail-cmd", help="shell command that causes the failure (with --target)")
    p.add_argument("--recover-cmd", help="shell command that ends it (with --target)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Load-test an rpc-gateway: steady load, bursts over a plan, many keys, "
        "revocation, node failure and Redis restart under load. Each scenario prints a "
        "Markdown report (or JSON with --json) and writes .json/.md/.png to --out-dir.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    parsers = {}
    # Listed here for --help only: main() hands "ws" to bench/scenarios/ws.py,
    # which has its own stack and options (python -m bench ws --help).
    sub.add_parser(
        "ws",
        help="WebSocket fan-out: N sockets on newHeads, delivery latency, RSS per socket",
        add_help=False,
    )
    for name, (description, _) in SCENARIOS.items():
        sp = sub.add_parser(
            name,
            help=_SHORT[name],
            description=description,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        _common(sp, name)
        parsers[name] = sp
    s = parsers["steady"]
    s.add_argument(
        "--vs",
        metavar="BASELINES",
        help="comma list of baselines run interleaved with the gateway: proxy (aiohttp "
        "pass-through), direct (the mock node), door=app / door=lean (a second gateway of the "
        "same stack behind the other door), or NAME=URL",
    )
    s.add_argument("--rounds", type=int, default=0, help="A B A B rounds (default 3 with --vs)")
    s.add_argument("--keys", type=int, default=1, help="keys to spread the load over")
    s.add_argument("--max-error-rate", type=fraction_arg, default=0.0)
    b = parsers["burst"]
    _plan_limits(b)
    b.add_argument("--tolerance", type=fraction_arg, default=0.05, help="allowed |ratio - 1|")
    m = parsers["many-keys"]
    _plan_limits(m)
    m.add_argument("--keys", type=int, default=30)
    m.add_argument("--per-key-rate", type=float, default=40.0, help="req/s sent with each key")
    m.add_argument("--tolerance", type=fraction_arg, default=0.10, help="allowed |ratio - 1|")
    r = parsers["revoke"]
    r.add_argument("--revoke-at", type=duration_arg("s"), default=3.0, help="after load start")
    r.add_argument("--key-id", help="id of --key (to revoke it with the CLI)")
    r.add_argument("--max-ms", type=float, default=1000.0, help="revocation target (ms)")
    n = parsers["node-failure"]
    _outage(n, ("kill", "hang"))
    n.add_argument("--max-error-rate", type=fraction_arg, default=0.01)
    n.add_argument("--settle", type=duration_arg("s"), default=2.0, help="grace after recovery")
    rr = parsers["redis-restart"]
    _outage(rr, ("kill", "term"))
    rr.add_argument("--max-recovery", type=duration_arg("s"), default=5.0)
    parsers["filters"].add_argument("--keys", type=int, default=200, help="keys, one filter each")
    sc = parsers["scale"]
    sc.add_argument(
        "--max-workers", type=int, default=0, help="largest worker count (0: min(8, CPUs))"
    )
    sc.add_argument("--keys", type=int, default=1, help="keys to spread the load over")
    sc.add_argument(
        "--min-efficiency",
        type=float,
        default=0.8,
        help="required throughput at N workers / (1-worker throughput x N)",
    )
    sc.add_argument(
        "--max-cpu-growth",
        type=fraction_arg,
        default=0.10,
        help="allowed change of the gateway's CPU per request at N workers vs 1 worker",
    )
    sc.add_argument("--max-error-rate", type=fraction_arg, default=0.0)
    mx = parsers["mix"]
    mx.add_argument("--keys", type=int, default=20, help="keys sending the mix")
    mx.add_argument("--seed", type=int, default=13, help="seed of the mix's order and params")
    mx.add_argument(
        "--rounds",
        type=count_arg,
        default=2,
        help="gateway and proxy phases interleaved, A B A B (each --duration long)",
    )
    mx.add_argument(
        "--cache-max-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="the gateway's cache.max_bytes (the byte budget checked)",
    )
    mx.add_argument(
        "--block-time",
        type=duration_arg("s"),
        default=3.0,
        help="the mock nodes' block time; the staleness of eth_blockNumber and latest "
        "answers is reported against it (BSC makes a block every 450ms)",
    )
    mx.add_argument(
        "--node-delay",
        type=spread_arg,
        metavar="MEAN+-SPREAD",
        help="mock node latency uniform in [mean - spread, mean + spread], e.g. 5ms+-3ms or "
        "20ms+-10ms (sets --node-latency and --node-jitter)",
    )
    mx.add_argument(
        "--min-vs-proxy",
        type=positive_arg,
        default=2.0,
        help="verdict: gateway throughput at least this many times the bare proxy's",
    )
    mx.add_argument(
        "--max-node-calls",
        type=positive_arg,
        default=0.05,
        help="verdict: node calls (upstream attempts) per answered client call at most this",
    )
    so = parsers["soak"]
    so.set_defaults(workers=2)
    so.add_argument("--keys", type=int, default=3000, help="keys the mixed traffic uses")
    so.add_argument("--seed", type=int, default=7, help="seed of the traffic's choices")
    so.add_argument(
        "--warmup",
        type=duration_arg("s"),
        default=None,
        help="not judged: the cache fills (default: 40%% of --duration)",
    )
    so.add_argument("--sample-every", type=duration_arg("s"), default=10.0)
    so.add_argument("--ws-per-s", type=float, default=8.0, help="WebSocket sockets opened per s")
    so.add_argument(
        "--hostile-per-s", type=float, default=2.0, help="slow, unread and reset clients per s"
    )
    so.add_argument(
        "--cache-max-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="the gateway's cache.max_bytes: small, so the soak reaches the bound",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ws"]:  # WebSocket fan-out: its own stack and options (bench/scenarios/ws.py)
        from bench.scenarios import ws

        return ws.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.keys_file:
        lines = Path(args.keys_file).read_text().splitlines()
        args.key = (args.key or []) + [line.strip() for line in lines if line.strip()]
    _, scenario = SCENARIOS[args.scenario]
    secrets = secrets_of(args.key, args.target)
    try:
        report = _run(scenario(args))
    except (RuntimeError, ConnectionError, OSError) as exc:
        print(f"bench: {redact_text(str(exc), secrets)}", file=sys.stderr)
        return 2
    # Before anything is written or printed: no key or URL credential in any output.
    report = redact_report(report, secrets)
    paths = write_outputs(
        report,
        out_dir=args.out_dir or None,
        out_json=args.out_json,
        out_md=args.out_md,
        plot_path=args.plot,
        make_plot=not args.no_plot,
    )
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_markdown(report))
    for kind, path in paths.items():
        print(f"bench: {kind} written to {path}", file=sys.stderr)
    return 1 if report["verdict"]["pass"] is False else 0


def _run(coro: Any) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
