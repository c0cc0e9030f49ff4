"""The scenarios: each sets up (or finds) a gateway, runs load, and judges it.

Every scenario returns a report dict (see bench/report.py).  With
``--target URL`` they run against an existing deployment; otherwise they
start a local stack (bench/stack.py) and tear it down afterwards.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from bench.scenarios.faults import NODE_FAILURE, REDIS_RESTART, node_failure, redis_restart
from bench.scenarios.filters import FILTERS, filters
from bench.scenarios.limits import BURST, MANY_KEYS, burst, many_keys
from bench.scenarios.mix import MIX, mix
from bench.scenarios.revoke import REVOKE, revoke
from bench.scenarios.scale import SCALE, scale
from bench.scenarios.soak import SOAK, soak
from bench.scenarios.steady import STEADY, steady
from bench.scenarios.tx import TX, tx

Scenario = Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]

SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "steady": (STEADY, steady),
    "burst": (BURST, burst),
    "many-keys": (MANY_KEYS, many_keys),
    "revoke": (REVOKE, revoke),
    "node-failure": (NODE_FAILURE, node_failure),
    "redis-restart": (REDIS_RESTART, redis_restart),
    "scale": (SCALE, scale),
    "mix": (MIX, mix),
    "soak": (SOAK, soak),
    "filters": (FILTERS, filters),
    "tx": (TX, tx),
}
