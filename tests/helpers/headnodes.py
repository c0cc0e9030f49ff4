"""The head tests' stage: mock chains, and the real app in front of their nodes.

``tests/integration/test_head_follow.py`` (the head from newHeads) and
``test_hostile_nodes.py`` (nodes that lie about it) both start
``gateway.demo.mockws`` nodes on two chains and the real app with a plan no
test reaches, then ask it calls with the test's key. Import
``mock_chains`` and ``head_gateway`` into such a module (``noqa: F401``):
the fixtures ``chains`` and ``gw``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.app import create_app
from gateway.demo.mockws import Chain
from tests.helpers.config import Client, MakeConfig

# No test here is about rate limits: a plan none of them reaches.
UNLIMITED = {"free": {"rate": 10_000, "burst": 10_000}}


@pytest.fixture(name="chains")
async def mock_chains() -> AsyncIterator[dict[str, Chain]]:
    """A bsc (56) and an opbnb (204) chain, not mining until a test starts them."""
    made = {"bsc": Chain(56, start_block=40_000_000), "opbnb": Chain(204, start_block=50_000_000)}
    yield made
    for chain in made.values():
        await chain.stop()
        for node in list(chain.nodes):
            await node.close()


@dataclass
class HeadGateway:
    """Starts the real app on a real port and calls it with the test's key."""

    make_config: MakeConfig
    aiohttp_client: Any
    key: str
    client: Client | None = None

    async def start(self, raw: dict[str, Any], upstreams: dict[str, list[str]]) -> Client:
        """The app with ``raw`` over the defaults and these node lists (plans: ``UNLIMITED``)."""
        cfg = self.make_config({"plans": UNLIMITED, **raw}, upstreams=upstreams)
        self.client = await self.aiohttp_client(create_app(cfg))
        assert self.client is not None
        return self.client

    async def call(self, method: str, params: list[Any], network: str = "bsc") -> tuple[int, Any]:
        """One call (on bsc unless ``network`` says): the HTTP status and the JSON answer."""
        assert self.client is not None, "start the app first"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        resp = await self.client.post(f"/{network}/{self.key}", json=body)
        return resp.status, await resp.json()

    async def result(self, method: str, params: list[Any], network: str = "bsc") -> Any:
        """One call (on bsc unless ``network`` says) that must succeed: its result."""
        status, answer = await self.call(method, params, network)
        assert status == 200 and "result" in answer, (status, answer)
        return answer["result"]


@pytest.fixture(name="gw")
def head_gateway(make_config: MakeConfig, aiohttp_client: Any, api_key: str) -> HeadGateway:
    return HeadGateway(make_config, aiohttp_client, api_key)


class WallChain(Chain):
    """A mock chain whose blocks are stamped as a live chain's are: block ``n`` at
    ``t0 + (n - n0) * spacing_s`` (wall seconds), so a node's freshness reads as it
    would in production (the canned blocks are stamped three seconds apart from
    genesis, which says nothing about now). ``fork_from``: blocks above it get
    hashes of their own: a consistent private fork (its headers, probes and
    by-number answers agree with each other, and no honest node has them)."""

    def __init__(
        self,
        chain_id: int,
        *,
        start_block: int,
        t0: float,
        spacing_s: float,
        fork_from: int | None = None,
        n0: int | None = None,
    ) -> None:
        super().__init__(chain_id, start_block=start_block)
        self.n0 = start_block if n0 is None else n0  # the block stamped t0
        self.t0, self.spacing_s = t0, spacing_s
        self.fork_from = fork_from

    def block_hash(self, number: int) -> str:
        if self.fork_from is not None and number > self.fork_from:
            return "0x" + hashlib.sha256(b"private:%d" % number).hexdigest()
        return super().block_hash(number)

    def block(self, number: int) -> dict[str, Any] | None:
        block = super().block(number)
        if block is not None:
            block["timestamp"] = hex(int(self.t0 + (number - self.n0) * self.spacing_s))
        return block
