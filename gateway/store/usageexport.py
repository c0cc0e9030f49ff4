"""A key's usage per day, as rows to take out for billing: CSV or JSON.

One row per day with ``method`` ``*``: the day's measured totals, the same
counters the Usage page and ``gateway usage`` sum (calls admitted, compute
units charged, calls refused by the rate limit, errors: calls no node
answered plus calls answered with a JSON-RPC error). Then one row per method
called that day: its calls, and its units at the key's plan weights
(``PlanConfig.cost``); the limiter counts refusals and errors per day, not
per method, so those two columns are empty there. The ``*`` rows are the
bill: a call the gateway refused by its own guard costs its minimum unit,
not the method's weight, so a day's method rows may sum above its units.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.store.records import Usage

COLUMNS = ("day", "key_id", "method", "calls", "units", "rate_limited", "errors")
ALL = "*"  # the method of a day's totals row

Row = dict[str, Any]


def usage_rows(usage: Usage, cost: Callable[[str], int]) -> list[Row]:
    """The export's rows, oldest day first; ``cost(method)``: units of one call."""
    methods_of = dict(usage.day_methods)
    rows: list[Row] = []
    for day_ms, totals in usage.per_day:
        day = datetime.fromtimestamp(day_ms / 1000, UTC).strftime("%Y-%m-%d")
        rows.append(
            {
                "day": day,
                "key_id": usage.key_id,
                "method": ALL,
                "calls": totals.get("req", 0),
                "units": totals.get("cu", 0),
                "rate_limited": totals.get("lim", 0),
                "errors": totals.get("err", 0) + totals.get("ans", 0),
            }
        )
        for method, calls in sorted(methods_of.get(day_ms, {}).items()):
            rows.append(
                {
                    "day": day,
                    "key_id": usage.key_id,
                    "method": method,
                    "calls": calls,
                    "units": calls * cost(method),
                    "rate_limited": None,
                    "errors": None,
                }
            )
    return rows


def to_csv(rows: list[Row]) -> str:
    """CSV whose first line names the columns (``COLUMNS``); an empty cell is unknown."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def to_json(rows: list[Row]) -> bytes:
    """``{"columns": [...], "rows": [...]}``; an unknown count is ``null``."""
    return orjson.dumps({"columns": list(COLUMNS), "rows": rows})


async def export_usage(
    store: Any, plans: Any, key_id: str, since_ms: int, account_id: str | None = None
) -> list[Row]:
    """The rows of ``key_id`` over the last ``since_ms`` (days kept 90), priced at its plan.

    ``store``: the ``Store`` (``get_key``, ``usage``); ``plans``: the ``Config``
    (``plan(name)``). A plan no longer configured prices a call at 1 unit.
    """
    record = await store.get_key(key_id, account_id)
    usage = await store.usage(key_id, since_ms, account_id=account_id)
    try:
        cost = plans.plan(record.plan).cost
    except KeyError:
        cost = _one
    return usage_rows(usage, cost)


def _one(method: str) -> int:
    return 1
