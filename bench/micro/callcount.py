"""``python -m bench.micro.callcount``: Python calls per cache-hit call, a figure noise cannot move.

``bench.micro.pipeline`` measures CPU time, which a busy two-core machine
moves by 20 % from one run to the next. This counts instead what that CPU
is spent on: the Python function calls (and coroutine resumptions) and the
calls into C that one cache-hit call makes, under ``sys.setprofile``, for
the same app, Redis, node and calls as ``bench.micro.pipeline`` (it runs
that benchmark, counting 1,000 of each shape's calls after 50 warm ones, fewer
when a very busy machine made fewer in its second).
Fewer calls is less CPU on any machine; the count is the same run to run
except for the rare call that refills its admission lease from Redis.

It uses only ``bench.micro.pipeline``'s ``one_call``, ``CALLS`` and
``main``, so it also counts an older tree (``PYTHONPATH`` set to it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from types import FrameType
from typing import Any

import bench.micro.pipeline as bp
from gateway.rpc.pipeline import Caller, Pipeline

WARM = 50
COUNTED = 1000


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.micro.callcount",
        description="Python calls and C calls per cache-hit call of bench.micro.pipeline.",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    measured = bp.one_call
    seen: dict[bytes, list[int]] = {}  # body: [calls made, Python calls, C calls]

    async def counted(pipeline: Pipeline, body: bytes, caller: Caller) -> bytes:
        tally = seen.setdefault(body, [0, 0, 0])
        tally[0] += 1
        if not WARM < tally[0] <= WARM + COUNTED:
            return await measured(pipeline, body, caller)

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                tally[1] += 1
            elif event == "c_call":
                tally[2] += 1

        sys.setprofile(profile)
        try:
            return await measured(pipeline, body, caller)
        finally:
            sys.setprofile(None)

    bp.one_call = counted  # measure() looks it up at each call
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its CPU table means nothing here
            bp.main(["--seconds", "1", "--repeats", "1"])
    finally:
        bp.one_call = measured
    rows = [
        {"shape": name, "python_calls": py / counted, "c_calls": c / counted, "counted": counted}
        for name, (made, py, c) in zip(bp.CALLS, seen.values(), strict=True)
        for counted in (max(1, min(made - WARM, COUNTED)),)  # fewer on a very busy machine
    ]
    if args.json:
        print(json.dumps({"benchmark": "calls per cache-hit call", "rows": rows}, indent=2))
        return
    print(f"{'call shape':<14} {'Python calls/hit':>17} {'C calls/hit':>12}")
    for row in rows:
        print(f"{row['shape']:<14} {row['python_calls']:>17.1f} {row['c_calls']:>12.1f}")


if __name__ == "__main__":
    main()
