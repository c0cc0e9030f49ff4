"""The ``eth_getLogs`` range guard: refuse a too-wide range before any node sees it.

A wide ``eth_getLogs`` is the most expensive read a node serves, and nodes
refuse it late and in their own words. The gateway answers it at once, with
the limit in ``error.data`` so a client can split its range.

Range = ``to - from + 1`` with ``earliest`` = 0, ``latest``/``pending`` = the
network head, ``safe``/``finalized`` their marks; ``fromBlock``/``toBlock``
default to ``latest``. The block-hash form names one block and is exempt.

It reads the params ``gateway.rpc.params`` rebuilt: the filter as a Go node
decodes it (keys case-insensitive, last one wins), with canonical names,
and the rebuild is what the node receives, so the range measured here is
the range the node would scan. Malformed filters were refused there. A
range that still cannot be measured (a tag before the first head is known)
passes: an unknown head is a matter of one probe interval at start-up.
"""

from __future__ import annotations

from typing import Any

from gateway.intel.head import HeadTracker
from gateway.intel.methods import block_ref, param


def logs_range(params: Any, heads: HeadTracker) -> int | None:
    """Blocks an ``eth_getLogs`` call spans, or None when it cannot be measured."""
    spec = param(params, 0)
    if type(spec) is not dict or "blockHash" in spec:
        return None
    ends: list[int] = []
    for name in ("fromBlock", "toBlock"):
        ref = block_ref(spec.get(name, "latest"))
        if ref == "pending":
            ref = "latest"
        number = heads.resolve(ref) if ref != "hash" else None
        if number is None:
            return None
        ends.append(number)
    return ends[1] - ends[0] + 1


def check_logs_range(params: Any, heads: HeadTracker, limit: int) -> dict[str, Any] | None:
    """``error.data`` for a -32602 answer when the range exceeds ``limit``, else None.

    ``limit`` is the plan's ``max_logs_range`` (0 = no limit).
    """
    if limit <= 0:
        return None
    span = logs_range(params, heads)
    if span is None or span <= limit:
        return None
    return {
        "reason": f"eth_getLogs over {span} blocks, the plan allows {limit}",
        "max_logs_range": limit,
        "requested_range": span,
    }
