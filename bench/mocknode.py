"""``python -m bench.mocknode``: run one mock node alone.

Prints the node's URL on the first stdout line, so scripts can start it on
port 0 and read where it listens.  Runs until SIGINT/SIGTERM.

By default the node is ``gateway/demo/mocknode.py`` (HTTP, configurable
latency and faults, never the bottleneck). ``--ws`` runs the demo's node
instead (``gateway/demo/mockws.py``): HTTP and WebSocket JSON-RPC on one
URL, ``eth_subscribe`` (newHeads, logs, newPendingTransactions), blocks with
logs every ``--block-time``; the fault options do not apply to it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from bench.units import duration_arg, fraction_arg
from gateway.demo.mocknode import MockNodeOptions, start_mock_node
from gateway.demo.mockws import Chain, start_ws_node


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.mocknode",
        description="A mock BSC/opBNB JSON-RPC node that is never the bottleneck. "
        "Prints its URL on stdout, then serves until interrupted.",
    )
    p.add_argument("--chain-id", type=int, default=56, help="56 (BSC) or 204 (opBNB); default 56")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    p.add_argument(
        "--latency", type=duration_arg("ms"), default=0.0, help="fixed latency, e.g. 20ms"
    )
    p.add_argument(
        "--jitter", type=duration_arg("ms"), default=0.0, help="extra random latency, e.g. 5ms"
    )
    p.add_argument(
        "--latency-dist",
        choices=("uniform", "exponential"),
        default="uniform",
        help="jitter distribution: uniform 0..jitter, or exponential with mean jitter",
    )
    p.add_argument("--error-rate", type=fraction_arg, default=0.0, help="fraction answered 500")
    p.add_argument("--rate-429", type=fraction_arg, default=0.0, help="fraction answered 429")
    p.add_argument("--drop-rate", type=fraction_arg, default=0.0, help="fraction dropped")
    p.add_argument(
        "--block-time", type=duration_arg("s"), default=1.0, help="head advance period (0 = frozen)"
    )
    p.add_argument("--start-block", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=None, help="seed for reproducible faults")
    p.add_argument(
        "--ws",
        action="store_true",
        help="also serve WebSocket subscriptions (the demo's node; no latency or faults)",
    )
    return p


def options_from_args(args: argparse.Namespace) -> MockNodeOptions:
    return MockNodeOptions(
        chain_id=args.chain_id,
        latency_ms=args.latency * 1000.0,
        latency_jitter_ms=args.jitter * 1000.0,
        latency_dist=args.latency_dist,
        error_rate=args.error_rate,
        rate_429=args.rate_429,
        drop_rate=args.drop_rate,
        block_time_s=args.block_time,
        start_block=args.start_block,
        seed=args.seed,
    )


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def serve(options: MockNodeOptions, host: str, port: int) -> None:
    node = await start_mock_node(options, host, port)
    print(node.url, flush=True)
    try:
        await _until_signalled()
    finally:
        await node.close()


async def serve_ws(options: MockNodeOptions, host: str, port: int) -> None:
    """The demo's HTTP + WebSocket node on one chain, mining every ``block_time_s``."""
    chain = Chain(
        options.chain_id, start_block=options.start_block, block_time_s=options.block_time_s
    )
    node = await start_ws_node(chain, host, port)
    chain.start()
    print(node.url, flush=True)
    try:
        await _until_signalled()
    finally:
        await node.close()
        await chain.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        options = options_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.run((serve_ws if args.ws else serve)(options, args.host, args.port))
    except ImportError:
        asyncio.run((serve_ws if args.ws else serve)(options, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
