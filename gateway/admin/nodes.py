"""``GET /admin/nodes`` and ``POST /admin/nodes/<network>/<name>/cordon`` / ``uncordon``.

A node's ``state``, the first that holds: ``cordoned`` (an operator said so:
probed, still has its say in the head, no new client call), ``inconsistent``
(what it said was provably wrong; ``why`` says what), ``out`` (not in
service: its last probe failed or it is on another chain; ``why``),
``behind`` (in service, but its head is not fresh enough to take part in
the head: no head-relative call), ``current`` (in service and taking part
in the head). ``in_service`` is true while a client call may go to it.
Latencies and the error rate are this process's (the node's recent
window; attempts since start). Never a node's URL with its credentials:
``url`` is the redacted form.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway import typedefs as T
from gateway.admin.calls import admin_source, answer, audit, caller, json_error
from gateway.upstream.pool import Node, NodePool


def add_node_routes(admin: web.Application) -> None:
    admin.router.add_get("/nodes", nodes_view)
    admin.router.add_post("/nodes/{network}/{name}/cordon", cordon)
    admin.router.add_post("/nodes/{network}/{name}/uncordon", uncordon)


def node_view(pool: NodePool, node: Node, now: float) -> dict[str, Any]:
    heads = pool.intel.heads
    p50, p95 = pool.intel.latency.quantiles(node.name, 0.5, 0.95)
    attempts = node.calls_ok + node.calls_failed
    state, why = _state(pool, node, now)
    return {
        "name": node.name,
        "url": node.display,
        "state": state,
        "why": why,
        "in_service": node.usable(now),
        "cordoned": node.cordon,
        "head": node.head,
        "confirmed_head": heads.node_head(node.name),
        "chain_id": node.chain_id,
        "limits": {
            "max_logs_range": node.logs_limit or None,
            "archive": node.archive,
            "state_blocks": node.state_blocks,
        },
        "latency_ms": {
            "p50": None if p50 is None else round(p50 * 1000, 2),
            "p95": None if p95 is None else round(p95 * 1000, 2),
        },
        "attempts": attempts,
        "error_rate": round(node.calls_failed / attempts, 4) if attempts else None,
        "in_flight": node.in_flight,
    }


def _state(pool: NodePool, node: Node, now: float) -> tuple[str, str | None]:
    if node.cordon is not None:
        return "cordoned", f"cordoned by {node.cordon.get('by')}"
    if node.inconsistent:
        return "inconsistent", node.inconsistent
    if not node.in_service():
        return "out", node.last_error or "not checked yet"
    if now < node.down_until:
        return "out", "cooling down after failures in a row"
    if not pool.intel.heads.current(node.name):
        return "behind", "its head is not fresh enough to take part in the head"
    return "current", None


async def nodes_view(request: web.Request) -> web.Response:
    source = admin_source(request)
    networks = []
    for name, pool in source[T.POOLS].items():
        now = pool.clock()
        networks.append(
            {
                "network": name,
                "chain_id": pool.network.chain_id,
                "head": pool.intel.heads.head.number,
                "split": pool.intel.heads.split,
                "nodes": [node_view(pool, node, now) for node in pool.nodes],
            }
        )
    return answer({"networks": networks})


def _find(request: web.Request) -> tuple[str, str] | web.Response:
    network, name = request.match_info["network"], request.match_info["name"]
    pool = admin_source(request)[T.POOLS].get(network)
    if pool is None:
        return json_error(404, f"no network named {network!r}")
    if not any(node.name == name for node in pool.nodes):
        return json_error(404, f"network {network!r} has no node named {name!r}")
    return network, name


async def cordon(request: web.Request) -> web.Response:
    """No new call to the node from any process sharing this Redis; calls on it finish."""
    found = _find(request)
    if isinstance(found, web.Response):
        return found
    network, name = found
    source = admin_source(request)
    store = source[T.STORE]
    who = caller(request).name
    info = await source[T.CORDONS].cordon(network, name, who, await store.now_ms())
    audit(request, "cordon", f"{network}/{name}")
    return answer({"network": network, "node": name, "cordoned": info})


async def uncordon(request: web.Request) -> web.Response:
    found = _find(request)
    if isinstance(found, web.Response):
        return found
    network, name = found
    removed = await admin_source(request)[T.CORDONS].uncordon(network, name)
    audit(request, "uncordon", f"{network}/{name}", was_cordoned=removed)
    return answer({"network": network, "node": name, "cordoned": None, "was_cordoned": removed})
