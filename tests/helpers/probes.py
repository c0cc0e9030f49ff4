"""What the health probe sends, so tests can leave it out of a node's call counts."""

from __future__ import annotations

from typing import Any, Final

from gateway.demo.mocknode import MockNode
from gateway.intel.head import PROBE_BODY

__all__ = ["PROBE_BODY", "forwarded", "is_probe_call"]

_PROBE_TAGS: Final = ("latest", "safe", "finalized")


def is_probe_call(method: Any, params: Any) -> bool:
    """One call of the probe batch (eth_getBlockByNumber of a head tag, no transactions)."""
    return (
        method == "eth_getBlockByNumber"
        and isinstance(params, list)
        and len(params) == 2
        and params[0] in _PROBE_TAGS
        and params[1] is False
    )


def forwarded(node: MockNode) -> int:
    """Calls ``node`` saw that were not the probe's (tests that count these send no
    eth_getBlockByNumber of their own)."""
    return node.calls - node.by_method["eth_getBlockByNumber"]
