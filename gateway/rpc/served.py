"""How an answer was served: ``X-Gateway-Cache`` and ``X-Gateway-Node``, from its calls.

Each call records how it was answered (``Call.served``: ``hit`` from the
cache, ``miss`` from a node, ``coalesced`` sharing an identical call's node
answer; ``Call.node``: the node's configured name, or several for a split
``eth_getLogs``). A request's ``X-Gateway-Cache`` is its calls' one state,
or ``mixed`` for a batch whose calls differ; ``miss`` when the gateway
answered everything itself (an error, a filter). ``X-Gateway-Node`` names
each node once, in order, with ``cache`` for hits and ``gateway`` for calls
the gateway answered itself. Never a URL or a key: node names are checked
short words (``config.nodes``).
"""

from __future__ import annotations

from typing import Final

from gateway.rpc.replies import ParsedRequest

CACHE_HEADER: Final = "X-Gateway-Cache"
NODE_HEADER: Final = "X-Gateway-Node"
BY_GATEWAY: Final = {CACHE_HEADER: "miss", NODE_HEADER: "gateway"}


def served_headers(req: ParsedRequest) -> dict[str, str]:
    """The two headers for a request's answer."""
    calls = req.calls
    if len(calls) == 1:  # the usual request: one call, most often a cache hit
        call = calls[0]
        if call.has_id:  # answered; a notification takes the general path
            served = call.served
            if not served:
                return dict(BY_GATEWAY)
            return {CACHE_HEADER: served, NODE_HEADER: call.node or "gateway"}
    states: list[str] = []
    nodes: list[str] = []
    for call in calls:
        if not call.answered:
            continue
        if call.served:
            states.append(call.served)
            nodes.append(call.node or "gateway")
        else:
            nodes.append("gateway")
    if not nodes:
        return dict(BY_GATEWAY)
    distinct = set(states)
    cache = states[0] if len(distinct) == 1 else "mixed" if distinct else "miss"
    return {CACHE_HEADER: cache, NODE_HEADER: ",".join(dict.fromkeys(nodes))}
