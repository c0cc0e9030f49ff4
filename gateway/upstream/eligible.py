"""Which nodes may take a call: the state they keep, and the method groups they serve.

A ``Route`` is worked out once per forwarded request (``Eligibility.route``)
and checked for each node the pool considers (``NodePool.pick``), so the
rules below narrow the usual choice (tier, fewest in flight, round robin)
and never replace it:

- **History**: a state read (``STATE_READS``) naming a block reads that
  block's state, which a full node keeps only for its last ``state_blocks``
  blocks (geth's 128) and an ``archive`` node for every block. Such a call
  goes only to nodes that hold the block. An EIP-1898 object naming a block
  by hash is placed by number where the gateway knows the hash (the heads
  it has followed while serving, and the blocks of logs it has served); an
  unknown hash goes to an archive node when one is in service (it holds
  whatever the hash names).
- **Log ranges**: an ``eth_getLogs`` goes only to nodes that take its range
  (``max_logs_range``, as lowered by refusals; 0 = any range);
  ``gateway.rpc.logsplit`` splits a range wider than every node takes.
- **Groups**: an ``extra_methods`` entry with a ``group`` reaches only the
  nodes whose ``groups`` hold it, under its own ``timeout_s``. Grouped
  nodes still serve every other call; a batch takes the strictest of its
  calls' routes (the oldest state, the longest timeout, the first group).

Whether any node in service holds a block (``holder_in_service``) is asked
before forwarding, so a read no node can answer is refused without asking
a pruned node (``gateway.rpc.history``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from gateway.config import MethodRoute, NetworkConfig
from gateway.intel.head import HeadTracker
from gateway.intel.logsguard import logs_range
from gateway.intel.methods import block_ref, param
from gateway.upstream.node import Node

# State reads and where their block param sits (missing = "latest").
STATE_READS: Final[dict[str, int]] = {
    "eth_call": 1,
    "eth_getBalance": 1,
    "eth_getCode": 1,
    "eth_getStorageAt": 2,
    "eth_getProof": 2,
    "eth_getTransactionCount": 1,
    "eth_estimateGas": 1,
    "eth_createAccessList": 1,
}
_HASHES_KEPT: Final = 4096  # block hash -> number pairs remembered per network


@dataclass(frozen=True, slots=True)
class Route:
    """What a request needs of a node; the default (``ANY``) needs nothing."""

    state_at: int = -1  # the oldest block whose state a call reads (-1: none)
    group: str = ""  # only nodes in this group ("" = any)
    timeout_s: float = 0.0  # the request's own deadline (0 = the pool's)
    logs_span: int = 0  # the widest eth_getLogs range it asks (0: none)

    def allows(self, node: Node, head: int) -> bool:
        if self.group and self.group not in node.groups:
            return False
        if self.logs_span and 0 < node.logs_limit < self.logs_span:
            return False
        return self.state_at < 0 or holds_state(node, self.state_at, head)


ANY: Final = Route()


def holds_state(node: Node, block: int, head: int) -> bool:
    """Whether ``node`` keeps the state of ``block`` (its own head, else the network's)."""
    if node.archive:
        return True
    top = node.head if node.head > 0 else head
    return block > top - node.state_blocks


class Eligibility:
    """One network's routing rules: method routes by name or ``prefix*``, block hashes seen."""

    def __init__(self, network: NetworkConfig, heads: HeadTracker) -> None:
        self.heads = heads
        self._exact: dict[str, MethodRoute] = {}
        patterns: list[tuple[str, MethodRoute]] = []
        for name, route in network.routes.items():
            if name.endswith("*"):
                patterns.append((name[:-1], route))
            else:
                self._exact[name] = route
        self._patterns = sorted(patterns, key=lambda p: -len(p[0]))
        self._hashes: OrderedDict[str, int] = OrderedDict()
        self._last_head: str | None = None

    def method_route(self, method: str) -> MethodRoute | None:
        """The ``extra_methods`` table entry of ``method``: its exact name wins over a pattern."""
        route = self._exact.get(method)
        if route is not None:
            return route
        for prefix, route in self._patterns:
            if method.startswith(prefix):
                return route
        return None

    def saw_block(self, block_hash: Any, number: Any) -> None:
        """Remember that ``block_hash`` is block ``number`` (bounded, oldest dropped)."""
        if type(block_hash) is str and type(number) is int:
            hashes = self._hashes
            hashes[block_hash.lower()] = number
            if len(hashes) > _HASHES_KEPT:
                hashes.popitem(last=False)

    def state_block(self, method: str, params: Any, nodes: Iterable[Node]) -> int:
        """The block whose state a call reads (-1: not a state read, or the latest state)."""
        index = STATE_READS.get(method)
        if index is None:
            return -1
        value = param(params, index, "latest")
        ref = block_ref(value)
        if ref == "hash":
            number = self._number_of(value)
            if number is not None:
                return number
            # Unknown hash: whatever block it names, an archive node holds it.
            return 0 if any(n.archive and n.in_service() for n in nodes) else -1
        if ref is None or ref in ("latest", "pending"):
            return -1
        number = self.heads.resolve(ref)
        return -1 if number is None else number

    def _number_of(self, value: Any) -> int | None:
        block_hash = value.get("blockHash") if type(value) is dict else value
        if type(block_hash) is not str:
            return None
        head = self.heads.head
        if head.hash is not None and block_hash.lower() == head.hash.lower():
            return head.number
        return self._hashes.get(block_hash.lower())

    def route(self, calls: Iterable[tuple[str, Any]], nodes: list[Node]) -> Route:
        """The route of the calls (method, params) one node will answer together."""
        head = self.heads.head
        if head.hash is not None and head.hash is not self._last_head:
            self._last_head = head.hash  # each head's hash, as requests see it move
            self.saw_block(head.hash, head.number)
        state_at = -1
        group = ""
        timeout = 0.0
        span = 0
        for method, params in calls:
            if method == "eth_getLogs":
                span = max(span, logs_range(params, self.heads) or 0)
                continue
            block = self.state_block(method, params, nodes)
            if block >= 0 and (state_at < 0 or block < state_at):
                state_at = block
            entry = self.method_route(method) if self._exact or self._patterns else None
            if entry is not None:
                group = group or entry.group
                timeout = max(timeout, entry.timeout_s)
        if state_at < 0 and not group and not timeout and not span:
            return ANY
        return Route(state_at, group, timeout, span)

    def holder_in_service(self, block: int, nodes: list[Node]) -> bool:
        """Whether a node in service keeps the state of ``block``."""
        head = self.heads.head.number
        return any(n.in_service() and holds_state(n, block, head) for n in nodes)
