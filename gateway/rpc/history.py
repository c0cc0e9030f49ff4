"""State reads no node in service can answer: refused in a pruned node's words, unasked.

A state read naming a block older than every in-service node keeps
(``upstream.eligible``: ``archive`` / ``state_blocks``) would get geth's
``missing trie node`` from whichever pruned node it reached. The gateway
answers that itself (-32000, the words clients and libraries match on)
without asking one, with the block in ``error.data``; the other calls of a
batch go on as usual. With no node in service at all nothing is refused
here: the usual 502 answers then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gateway.rpc import protocol as rpc
from gateway.upstream.eligible import STATE_READS
from gateway.upstream.pool import NodePool

# geth: "missing trie node <hash> (path ) <reason>"; clients match the first words.
MISSING_STATE: Final = rpc.ErrorKind(-32000, "missing trie node", 200, explained=False)


def refuse_missing_state(pool: NodePool, calls: Sequence[rpc.Call]) -> bool:
    """Mark each state read whose block no node in service keeps with ``MISSING_STATE``.

    Asked only for the calls the cache did not answer: a cached answer for a
    block stays right whichever nodes are in service. True: a call was marked.
    """
    eligibility = pool.eligibility
    nodes = pool.nodes
    serving: bool | None = None
    refused = False
    for call in calls:
        if call.error is not None or call.local is not None or call.method not in STATE_READS:
            continue
        block = eligibility.state_block(call.method, call.params, nodes)
        if block < 0 or eligibility.holder_in_service(block, nodes):
            continue
        if serving is None:
            serving = any(node.in_service() for node in nodes)
        if not serving:
            return refused
        refused = True
        call.error = MISSING_STATE
        call.reason = {
            "reason": f"the state of block {block} is kept only by archive nodes, "
            "and none is in service",
            "block": block,
        }
    return refused
