"""Transaction settings: per network (broadcast, private endpoints, sender limit) and per plan.

Network table keys (``[networks.<name>]``)::

    tx_broadcast = "all"        # "all": every node in service at once; "one": like any call
    private_tx = ["https://..."]  # builder / relay endpoints of the private route
    tx_per_sender_rate = 5.0    # raw transactions per second per sender, all processes
    tx_per_sender_burst = 20
    tx_timeout_s = 5.0          # one private endpoint / broadcast attempt

Plan table keys (``[plans.<name>]``)::

    private_tx = "off"          # "on" | "fallback" | "off": the route of the plan's keys
    bundle_rate = 1.0           # eth_sendBundle calls per second per key
    bundle_burst = 5

Read and checked by txload.py. A key's own choice (``gateway keys update KEY
--private-tx``) overrides the
plan's; see gateway/tx/keymode.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MODES: Final = ("on", "fallback", "off")
NETWORK_KEYS: Final = frozenset(
    {"tx_broadcast", "private_tx", "tx_per_sender_rate", "tx_per_sender_burst", "tx_timeout_s"}
)
PLAN_KEYS: Final = frozenset({"private_tx", "bundle_rate", "bundle_burst"})


@dataclass(frozen=True, slots=True)
class NetworkTxConfig:
    broadcast: str = "all"
    private_tx: tuple[str, ...] = ()
    per_sender_rate: float = 5.0  # 0 = no sender limit
    per_sender_burst: int = 20
    timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class PlanTxConfig:
    private_tx: str = "off"
    bundle_rate: float = 1.0  # 0 = no bundle rate
    bundle_burst: int = 5
