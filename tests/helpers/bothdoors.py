"""One gateway, two listeners: the application door and the lean door, side by side.

The differential (tests/integration/test_door_parity.py) sends the same bytes
to both and compares the answers byte for byte. Both listeners belong to one
app in one process (one Redis key, one set of mock nodes, one pool), so an
answer can only differ by the door that wrote it. The app runs in a thread
of its own, with its own event loop, so that hypothesis (synchronous) can
drive it over blocking sockets.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.app import create_app
from gateway.config import config_from_dict
from gateway.demo.mocknode import start_mock_node
from gateway.demo.nodeoptions import MockNodeOptions
from gateway.redis.embedded import LOOPBACK
from gateway.server.door import Door, lean_protocol
from gateway.server.listener import GatewayRunner
from tests.helpers.fuzzstack import _make_key
from tests.helpers.procs import mock_node_process


@dataclass(frozen=True, slots=True)
class BothDoors:
    app_port: int
    lean_port: int
    key: str
    door: Door  # its ``taken`` counts what the lean door answered itself
    prefix: str = ""  # the Redis key prefix (a test may add keys of its own)


def config(
    redis_url: str,
    prefix: str,
    bsc: str,
    opbnb: str,
    hostile: Mapping[str, str] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    **server: Any,
) -> Any:
    """No cache (a second send of a call would be a hit), limits no test reaches.

    ``hostile``: more networks (chain 56), each served by the one node at that
    URL; ``extra``: tables merged into the config's own (a plan, a limit).
    """
    networks: dict[str, Any] = {"bsc": {"upstreams": [bsc]}, "opbnb": {"upstreams": [opbnb]}}
    for name, url in (hostile or {}).items():
        networks[name] = {"upstreams": [url], "chain_id": 56}
    raw: dict[str, dict[str, Any]] = {
        "redis": {
            "url": redis_url,
            "prefix": prefix,
            "timeout_ms": 2000,
            "connect_timeout_ms": 2000,
        },
        "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
        "networks": networks,
        "cache": {"enabled": False},
        "upstream": {"probe_interval_s": 0.5},
        "server": {"access_log": False, "metrics_listen": "", **server},
    }
    for table, values in (extra or {}).items():
        raw.setdefault(table, {}).update(values)
    return config_from_dict(raw)


@contextmanager
def both_doors(
    redis_url: str,
    hostile: Mapping[str, MockNodeOptions] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    **server: Any,
) -> Iterator[BothDoors]:
    """The two-door gateway; ``hostile``: more networks, each one in-process mock node
    behaving as told (on the gateway's loop), ``extra``: config tables merged in."""
    prefix = "bd" + secrets.token_hex(4)
    with ExitStack() as stack:
        bsc = stack.enter_context(mock_node_process(56))
        opbnb = stack.enter_context(mock_node_process(204))
        key = asyncio.run(_make_key(redis_url, prefix))
        loop = asyncio.new_event_loop()
        ready: list[Any] = []
        started = threading.Event()
        stop = asyncio.Event()

        async def main() -> None:
            nodes = {name: await start_mock_node(o) for name, o in (hostile or {}).items()}
            urls = {name: node.url for name, node in nodes.items()}
            app = create_app(config(redis_url, prefix, bsc, opbnb, urls, extra, **server))
            runner = GatewayRunner(app)
            await runner.setup()
            try:
                site = web.TCPSite(runner, LOOPBACK, 0)
                await site.start()
                server_ = runner.server
                assert server_ is not None
                make = lean_protocol(app)
                lean = await loop.create_server(
                    lambda: make(server_, loop=loop, **server_._kwargs), LOOPBACK, 0
                )
                ready.extend(
                    [
                        int(runner.addresses[0][1]),
                        lean.sockets[0].getsockname()[1],
                        make.keywords["door"],  # type: ignore[attr-defined]
                    ]
                )
                started.set()
                await stop.wait()
                lean.close()
            finally:
                started.set()
                await runner.cleanup()
                for node in nodes.values():
                    await node.close()

        thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
        thread.start()
        started.wait(60)
        assert ready, "the two-door server did not start"
        try:
            yield BothDoors(ready[0], ready[1], key, ready[2], prefix)
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(30)
            loop.close()
