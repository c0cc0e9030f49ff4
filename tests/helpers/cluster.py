"""A real Redis Cluster on loopback, from the bundled redis-server binary.

Nodes are started with ``cluster-enabled yes`` and joined by hand (CLUSTER
MEET, ADDSLOTS, REPLICATE), which is what ``redis-cli --cluster create``
does, minus its one-second polling sleeps. Redis 6.2 puts the cluster bus on
``port + 10000``, so ports are chosen below 55536 with both ends free.

Nodes run with ``cluster-require-full-coverage no`` (the setting
docs/DEPLOYING.md recommends: a shard without a primary does not stop the
others) and ``cluster-replica-validity-factor 0`` (a replica may always be
promoted), with a short ``cluster-node-timeout`` so failovers take seconds.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from gateway.redis.embedded import LOOPBACK, RedisProcess

SLOTS = 16384


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A port whose cluster bus port (``port + 10000``) is free as well."""
    for _ in range(200):
        port = random.randint(20_000, 45_000)
        if _port_free(port) and _port_free(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class ClusterNode:
    proc: RedisProcess
    node_id: str = ""

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def url(self) -> str:
        return self.proc.url

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(
            host=LOOPBACK,
            port=self.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
        )

    def call(self, *args: str | int) -> object:
        with self.client() as c:
            return c.execute_command(*args)

    @property
    def alive(self) -> bool:
        return self.proc.proc is not None and self.proc.proc.poll() is None


@dataclass
class RedisCluster:
    """``primaries`` primaries, each with ``replicas`` replicas, on loopback."""

    base_dir: Path
    primaries: int = 3
    replicas: int = 0
    node_timeout_ms: int = 1000
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A URL of one live node: enough for a cluster client to discover the rest."""
        return next(n for n in self.nodes if n.alive).url

    def start(self, timeout_s: float = 15.0) -> RedisCluster:
        deadline = time.monotonic() + timeout_s
        try:
            for i in range(self.primaries * (1 + self.replicas)):
                self.nodes.append(ClusterNode(self._start_node(i)))
            for node in self.nodes:
                node.node_id = str(node.call("CLUSTER", "MYID"))
            first = self.nodes[0]
            for node in self.nodes[1:]:
                node.call("CLUSTER", "MEET", LOOPBACK, first.port)
            per = SLOTS // self.primaries
            for i, node in enumerate(self.nodes[: self.primaries]):
                end = SLOTS if i == self.primaries - 1 else (i + 1) * per
                node.call("CLUSTER", "ADDSLOTS", *range(i * per, end))
            self._wait(deadline, self._all_known, "nodes did not meet")
            for j, node in enumerate(self.nodes[self.primaries :]):
                primary = self.nodes[j % self.primaries]
                node.call("CLUSTER", "REPLICATE", primary.node_id)
            self._wait(deadline, self.ready, "cluster did not become ok")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, i: int) -> RedisProcess:
        last: Exception | None = None
        for _ in range(5):
            proc = RedisProcess(
                self.base_dir / f"node{i}",
                persist=False,
                tcp=True,  # a cluster's bus needs TCP
                extra_args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(self.node_timeout_ms),
                    "--cluster-replica-validity-factor",
                    "0",
                    "--cluster-require-full-coverage",
                    "no",
                ),
            )
            conf = self.base_dir / f"node{i}" / "nodes.conf"
            if conf.exists():
                conf.unlink()
            try:
                proc.start(port=cluster_port())
                return proc
            except RuntimeError as exc:  # port raced away: try another pair
                last = exc
        raise RuntimeError(f"cluster node {i} did not start: {last}")

    @staticmethod
    def _wait(deadline: float, check: Callable[[], bool], what: str) -> None:
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.05)
        raise RuntimeError(what)

    def _all_known(self) -> bool:
        for node in self.nodes:
            lines = str(node.call("CLUSTER", "NODES")).strip().splitlines()
            if len(lines) != len(self.nodes) or any("handshake" in ln for ln in lines):
                return False
        return True

    def ready(self) -> bool:
        """Every live node says ``cluster_state:ok`` and every live replica is in sync."""
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                info = str(node.call("CLUSTER", "INFO"))
                if "cluster_state:ok" not in info:
                    return False
                with node.client() as c:
                    repl = c.info("replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
            except redis.RedisError:
                return False
        return True

    def role_of(self, node: ClusterNode) -> str:
        with node.client() as c:
            return str(c.info("replication")["role"])

    def topology(self) -> list[dict[str, str]]:
        """CLUSTER NODES as seen by a live node: id, port, role, primary id, slots."""
        live = next(n for n in self.nodes if n.alive)
        out = []
        for line in str(live.call("CLUSTER", "NODES")).strip().splitlines():
            parts = line.split()
            out.append(
                {
                    "id": parts[0],
                    "port": parts[1].split("@")[0].rsplit(":", 1)[1],
                    "flags": parts[2],
                    "primary": parts[3],
                    "slots": " ".join(parts[8:]),
                }
            )
        return out

    def primary_for(self, key: str) -> ClusterNode:
        """The node that serves ``key``'s slot now."""
        slot = int(str(next(n for n in self.nodes if n.alive).call("CLUSTER", "KEYSLOT", key)))
        for entry in self.topology():
            if "master" not in entry["flags"] or "fail" in entry["flags"]:
                continue
            for span in entry["slots"].split():
                lo, _, hi = span.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return self._by_id(entry["id"])
        raise LookupError(key)

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        for entry in self.topology():
            if (
                entry["primary"] == primary.node_id
                and "fail" not in entry["flags"]
                and self._by_id(entry["id"]).alive
            ):
                return self._by_id(entry["id"])
        raise LookupError(f"no replica of the node on port {primary.port}")

    def _by_id(self, node_id: str) -> ClusterNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def stop(self) -> None:
        for node in self.nodes:
            node.proc.stop()
