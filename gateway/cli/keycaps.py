"""``gateway keys limit KEY_ID`` and the month's cost in ``gateway usage``.

Thin: parsing and wording only; the checks live in gateway/store/keylimits.py
and the sums in gateway/store/insightquery.py, shared with the dashboard.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config import Config
from gateway.store.accounts import Store, StoreError
from gateway.store.insightquery import InsightStore, fmt_money
from gateway.store.keylimits import KeyLimits, fmt_rate

Command = Callable[[Store], Awaitable[tuple[Any, str]]]


def add_limit_parser(keys: Any) -> None:
    """The ``keys limit`` sub-command on the ``keys`` sub-parsers."""
    kl = keys.add_parser(
        "limit",
        help="cap a key below its plan: requests per second and/or compute units per day",
        description="Set a key's own caps (stricter than its plan). A cap not given stays "
        "as it is; --clear returns both to the plan's.",
    )
    kl.add_argument("key_id")
    kl.add_argument(
        "--rate", type=float, metavar="N", help="requests per second, at most the plan's"
    )
    kl.add_argument("--daily-cu", type=int, metavar="N", help="compute units per UTC day (>= 1)")
    kl.add_argument("--clear", action="store_true", help="remove both caps (use the plan's)")
    kl.add_argument("--json", action="store_true", help="print JSON")


def limit_command(args: argparse.Namespace, cfg: Config) -> Command:
    async def limit(store: Store) -> tuple[Any, str]:
        if args.clear and (args.rate is not None or args.daily_cu is not None):
            raise StoreError("--clear removes both caps; give it alone")
        record = await store.get_key(args.key_id)
        rate, daily = record.rate_cap, record.daily_cu_cap
        if args.clear:
            rate, daily = None, None
        if args.rate is not None:
            rate = args.rate
        if args.daily_cu is not None:
            daily = args.daily_cu
        rec = await KeyLimits(store, cfg.plans).set_key_limits(
            None, args.key_id, rate=rate, daily_cu=daily
        )
        shown_rate = f"{fmt_rate(rec.rate_cap)}/s" if rec.rate_cap is not None else "plan's rate"
        shown_daily = (
            f"{rec.daily_cu_cap} CU/day" if rec.daily_cu_cap is not None else "plan's daily quota"
        )
        value = {"id": rec.id, "rate_cap": rec.rate_cap, "daily_cu_cap": rec.daily_cu_cap}
        return value, f"key {rec.id} limits: {shown_rate}, {shown_daily}"

    return limit


async def month_of_key(store: Store, cfg: Config, key_id: str) -> tuple[dict[str, Any], str]:
    """The key's compute units and estimated cost this month (JSON value, one text line)."""
    record = await store.get_key(key_id)
    cost = await InsightStore(store, cfg.plans).month_cost([record], record.plan)
    text = (
        f"  this month: {cost.compute_units} compute units, estimated "
        f"{fmt_money(cost.estimated_cost)} at {fmt_money(cost.price_per_million_cu)} "
        f"per million ({cost.plan})"
    )
    return cost.as_json(), text
