"""Revocation under load: how fast a revoked key stops working."""

from __future__ import annotations

import argparse
from typing import Any

from bench import report as rpt
from bench import verdicts as v
from bench.loadgen import LoadResult
from bench.scenarios.common import (
    base_report,
    environment,
    finish,
    load_spec,
    run_with_events,
)

REVOKE = (
    "Steady load on one key, then `gateway keys revoke` mid-run: how many ms until the first "
    "401, and until no request sent after the revocation is admitted any more (target: "
    "under 1 s on every process)."
)


async def revoke(args: argparse.Namespace) -> dict[str, Any]:
    plan = args.plan or "payg"
    async with environment(args) as env:
        pairs = await env.keys(1, plan)
        key, key_id = pairs[0]
        key_id = args.key_id or key_id
        if key_id is None:
            raise SystemExit("bench: revoke needs the key's id: --key-id or --create-keys")
        spec = load_spec(args, env, env.gateway_url, [key])
        res, events = await run_with_events(
            spec,
            [(args.revoke_at, f"keys revoke {key_id}", lambda: env.revoke(key_id))],
            progress=not args.quiet,
            label="revoke",
            stack=env.stack,
        )
        report = base_report("revoke", REVOKE, args, env)
        report["targets"]["gateway"] = rpt.summarize([res])
        report["events"] = [{k: e[k] for k in ("t_s", "what")} for e in events]
        report["timeline"] = rpt.timeline(res)
        figures, checks = revoke_verdict(res, events[0]["abs"], events[1]["abs"], args.max_ms)
        report["figures"].update(figures)
        return finish(report, checks)


def revoke_verdict(
    res: LoadResult, cmd_start: float, cmd_done: float, max_ms: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Times (ms) from the revoke command to the first 401 and to the last admission."""

    def ms(t: float | None, ref: float) -> float | None:
        return None if t is None else (t - ref) * 1000.0

    first_401 = res.first_done.get("http_401")
    last_ok_sent = max(
        (res.last_sent[k] for k in v.ADMITTED_KINDS if k in res.last_sent), default=None
    )
    effective = ms(last_ok_sent, cmd_done)
    figures = {
        "revoke command took (ms)": (cmd_done - cmd_start) * 1000.0,
        "first 401, ms after the command started": ms(first_401, cmd_start),
        "first 401, ms after the command returned": ms(first_401, cmd_done),
        "last admitted request sent, ms after the command returned": effective,
        "401 answers": res.kinds.get("http_401", 0),
    }
    checks = [
        v.check(
            "the key stopped working", first_401 is not None, f"{figures['401 answers']} x 401"
        ),
        v.check(
            f"revocation effective within {max_ms:g} ms",
            first_401 is not None and (effective is None or effective <= max_ms),
            f"last admitted request sent {effective if effective is not None else 0:.0f} ms "
            "after the revoke command returned",
        ),
    ]
    return figures, checks
