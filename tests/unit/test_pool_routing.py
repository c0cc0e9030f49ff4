"""NodePool.pick with a block the call names: only nodes that have it, still round robin."""

from __future__ import annotations

from gateway.config import DEFAULT_METHODS, NetworkConfig, UpstreamConfig
from gateway.intel.head import HeadReport
from gateway.upstream.pool import NodePool


def _pool(n: int) -> NodePool:
    net = NetworkConfig(
        name="bsc",
        prefix="/bsc",
        chain_id=56,
        upstreams=tuple(f"http://127.0.0.1:{9 + i}" for i in range(n)),
        methods=frozenset(DEFAULT_METHODS),
    )
    pool = NodePool(net, UpstreamConfig(), 0.5, 2.0)
    for node in pool.nodes:  # as after a probe that verified them
        node.healthy = node.verified = True
    return pool


def test_a_block_above_a_nodes_head_skips_it_and_the_rest_still_rotate() -> None:
    pool = _pool(3)
    for name, head in (("bsc-0", 100), ("bsc-1", 100), ("bsc-2", 50)):
        pool.intel.heads.observe(name, HeadReport(head))
    picked = [pool.pick(min_block=80) for _ in range(6)]
    names = [node.name for node in picked if node is not None]
    assert "bsc-2" not in names
    assert names.count("bsc-0") >= 2 and names.count("bsc-1") >= 2  # the rotation moves on
    # a block nobody is known to have: any node (it may have moved on since the probe)
    assert {n.name for n in (pool.pick(min_block=500) for _ in range(3)) if n} == {
        "bsc-0",
        "bsc-1",
        "bsc-2",
    }
    # no block named: every node
    assert {n.name for n in (pool.pick() for _ in range(3)) if n} == {"bsc-0", "bsc-1", "bsc-2"}


def test_a_node_not_verified_or_not_healthy_is_never_picked() -> None:
    pool = _pool(3)
    pool.nodes[0].verified = False  # wrong chain, or never checked
    pool.nodes[1].healthy = False  # its last probe failed
    assert {n.name for n in (pool.pick() for _ in range(6)) if n} == {"bsc-2"}
    pool.nodes[2].verified = False
    assert pool.pick() is None
