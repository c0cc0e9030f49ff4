"""Raw transactions through the gateway: how many per second, and what each adds in CPU.

Pre-signed EIP-1559 transfers (eth-account; one per sender, so the
per-sender limit never bites and every node accepts) are sent at ``--rate``
for ``--duration`` (open loop), then ``eth_blockNumber`` at the same rate
(a plain forwarded call), then transactions closed-loop on
``--connections`` for the most per second. The gateway's CPU (its process
tree, ``/proc``) is read around each phase: the difference per call between
the first two is what decoding, the sender bucket and the broadcast to
every node add over a plain call. The decode alone (``gateway.tx.codec``,
in this process) is timed too. Needs the local stack (it reads process CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import aiohttp
import orjson

from bench import verdicts as v
from bench.scenarios.common import base_report, environment, finish, log, prefix_of
from bench.stack import BENCH_PLAN
from gateway.tx.codec import decode_raw_tx

TX = (
    "Raw transactions (eth_sendRawTransaction, broadcast to every node): the rate sustained "
    "closed-loop, and the gateway CPU each adds over a plain forwarded call at the same rate."
)


def _sign(count: int, chain_id: int) -> list[str]:
    """``count`` transfers of 1 wei, each from its own sender (nonce 0)."""
    limit = sys.getrecursionlimit()  # py_ecc (under eth_account) raises it on import
    from eth_account import Account

    sys.setrecursionlimit(limit)
    out = []
    for i in range(count):
        acct = Account.from_key((0x1000 + i).to_bytes(32, "big"))
        tx = {
            "type": 2, "chainId": chain_id, "nonce": 0, "gas": 21_000, "to": "0x" + "22" * 20,
            "value": 1, "maxFeePerGas": 2 * 10**9, "maxPriorityFeePerGas": 10**9,
        }  # fmt: skip
        out.append("0x" + bytes(acct.sign_transaction(tx).raw_transaction).hex())
    return out


async def _open_loop(
    session: aiohttp.ClientSession, url: str, bodies: list[bytes], rate: float
) -> dict[str, float]:
    counts = {"sent": 0.0, "errors": 0.0}
    interval = 1.0 / max(rate, 0.001)
    start = time.monotonic()

    async def one(body: bytes) -> None:
        async with session.post(url, data=body) as resp:
            answer = orjson.loads(await resp.read())
        counts["sent"] += 1
        if "error" in answer:
            counts["errors"] += 1

    tasks = []
    for i, body in enumerate(bodies):
        await asyncio.sleep(max(0.0, start + i * interval - time.monotonic()))
        tasks.append(asyncio.create_task(one(body)))
    await asyncio.gather(*tasks)
    return counts


async def _closed_loop(
    session: aiohttp.ClientSession, url: str, bodies: list[bytes], connections: int
) -> tuple[float, float]:
    queue = list(reversed(bodies))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while queue:
            body = queue.pop()
            async with session.post(url, data=body) as resp:
                if "error" in orjson.loads(await resp.read()):
                    errors += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return len(bodies) / (time.monotonic() - started), float(errors)


def _body(method: str, params: list[Any], i: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params})


async def tx(args: argparse.Namespace) -> dict[str, Any]:
    if args.target:
        raise SystemExit("bench: tx needs the local stack (it reads process CPU)")
    chain_id = 204 if args.network == "opbnb" else 56
    count = max(1, int(args.rate * args.duration))
    log(f"signing {count * 2} transactions")
    raws = _sign(count * 2, chain_id)
    decode_raw_tx(bytes.fromhex(raws[0][2:]), chain_id)  # first call: lazy imports
    started = time.perf_counter()
    for raw in raws[:count]:
        decode_raw_tx(bytes.fromhex(raw[2:]), chain_id)
    decode_us = (time.perf_counter() - started) / count * 1e6
    async with environment(args) as env:
        stack = env.stack
        assert stack is not None and stack.gateway is not None
        key = (await env.keys(1, args.plan or BENCH_PLAN))[0][0]
        url = f"{env.gateway_url}{prefix_of(args)}/{key}"
        cpu = stack.gateway.cpu_seconds
        connector = aiohttp.TCPConnector(limit=args.connections)
        async with aiohttp.ClientSession(
            connector=connector, headers={"Content-Type": "application/json"}
        ) as session:
            sends = [_body("eth_sendRawTransaction", [r], i) for i, r in enumerate(raws[:count])]
            plain = [_body("eth_blockNumber", [], i) for i in range(count)]
            phases: dict[str, dict[str, float]] = {}
            for name, bodies in (("transactions", sends), ("plain", plain)):
                cpu0 = cpu()
                phases[name] = await _open_loop(session, url, bodies, args.rate)
                phases[name]["cpu_s"] = cpu() - cpu0
                log(f"{name}: {phases[name]}")
            rest = [_body("eth_sendRawTransaction", [r], i) for i, r in enumerate(raws[count:])]
            per_s, closed_errors = await _closed_loop(session, url, rest, args.connections)
    report = base_report("tx", TX, args, env)
    sent, base = phases["transactions"], phases["plain"]
    tx_us = sent["cpu_s"] / max(sent["sent"], 1.0) * 1e6
    plain_us = base["cpu_s"] / max(base["sent"], 1.0) * 1e6
    figures = report["figures"]
    figures["raw transactions per second (closed loop)"] = f"{per_s:,.0f}"
    figures["gateway CPU per transaction"] = f"{tx_us:,.0f} µs"
    figures["gateway CPU per plain call"] = f"{plain_us:,.0f} µs"
    added = tx_us - plain_us
    figures["added per transaction (decode, sender bucket, broadcast)"] = f"{added:,.0f} µs"
    figures["decode and sender recovery alone"] = f"{decode_us:,.0f} µs"
    figures["nodes each transaction went to"] = str(len(stack.nodes.get(args.network, [])))
    checks = [
        v.check("no errors", sent["errors"] == 0 and closed_errors == 0,
                f"open loop {sent['errors']:.0f}, closed loop {closed_errors:.0f}"),
    ]  # fmt: skip
    report["notes"].append(
        "Each transaction is from its own sender (nonce 0), so every node accepts it and the "
        "sender limit never refuses one; the broadcast goes to every node of the stack."
    )
    return finish(report, checks)
