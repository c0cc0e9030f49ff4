"""The node table's shape: one upstream node as configured, and where a heavy method goes.

Plain frozen dataclasses, read and checked in config/nodes.py; ``NetworkConfig``
(schema.py) holds them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One ``upstreams`` entry: a URL, or a table describing the node (config/nodes.py).

    ``name`` is what logs, metrics and the ``X-Gateway-Node`` header show
    (never the URL); ``state_blocks``: how many recent blocks' state the
    node keeps (geth's default 128), ignored when ``archive``;
    ``max_logs_range``: the widest ``eth_getLogs`` range it takes (0 = no
    known limit); ``groups``: the method groups it serves (``extra_methods``).
    """

    url: str
    name: str
    ws_url: str = ""
    archive: bool = False
    state_blocks: int = 128
    max_logs_range: int = 0
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MethodRoute:
    """Where an operator-offered method goes: nodes of ``group`` ("" = any), its own timeout."""

    group: str = ""
    timeout_s: float = 0.0  # 0 = limits.upstream_timeout_s
