"""The one constructor of the stores that work over the ``Store`` with the configured plans.

``KeyLimits`` (a key's caps, checked against its plan) and ``InsightStore``
(insight and cost, priced by plan) both read through the shared ``Store``'s
Redis and look plans up by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.config import PlanConfig
from gateway.store.accounts import Store


class PlanView:
    """Over the shared ``Store``: its Redis client and key prefix, and the plans by name."""

    def __init__(self, store: Store, plans: Sequence[PlanConfig]) -> None:
        self.store = store
        self.redis: Any = store.redis
        self.prefix = store.prefix
        self._plans = {p.name: p for p in plans}
