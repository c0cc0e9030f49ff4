"""What the health probe sends, so tests can leave it out of a node's call counts."""

from __future__ import annotations

from typing import Any, Final

from gateway.demo.mocknode import MockNode
from gateway.upstream.health import CHECK_BODY as PROBE_BODY  # heads + the chain check

__all__ = ["PROBE_BODY", "forwarded", "is_probe_call"]

_PROBE_TAGS: Final = ("latest", "safe", "finalized")


def is_probe_call(method: Any, params: Any) -> bool:
    """One call of the probe batch: eth_getBlockByNumber of a head tag (no transactions),
    or its chain check, eth_chainId without params (a client's call always gets ``[]``)."""
    if method == "eth_chainId" and params is None:
        return True
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
