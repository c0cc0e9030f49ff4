"""Operator endpoints, metrics and access logs, through the real app.

The canary test sends a real key in the path and the header through every
error path of docs/API.md's table (and the upstream and Redis failures) and then reads
every log record of every logger: the key must be in none of them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.demo.mocknode import MockNode, MockNodeOptions
from gateway.redis.embedded import free_port
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import Client, MakeConfig
from tests.helpers.readyz import readyz_details
from tests.helpers.scrape import scrape
from tests.helpers.served import served

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
JSON = {"Content-Type": "application/json"}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_healthz(client: Client) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200 and (await resp.json()) == {"status": "ok"}


@pytest.mark.slow
async def test_readyz_ready_and_node_down(client: Client, mock_nodes: dict[str, MockNode]) -> None:
    """One network down: the pod stays ready (default ready_requires) and says which."""
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200 and body["ready"], body
    bsc = body["networks"]["bsc"]
    assert {k: bsc[k] for k in ("ready", "nodes", "healthy", "fresh")} == {
        "ready": True,
        "nodes": 1,
        "healthy": 1,
        "fresh": 1,
    }
    assert body["redis"] == {"ready": True} and body["requires"] == ["redis", "any_network"]
    # the public port names no node and no address; the metrics listener does
    assert "upstreams" not in bsc and mock_nodes["bsc"].url not in await resp.text()
    _, details = await readyz_details(client.app)
    bsc = details["networks"]["bsc"]
    assert bsc["upstreams"][0]["url"] == mock_nodes["bsc"].url
    assert bsc["upstreams"][0]["verified"] and bsc["upstreams"][0]["chain_id"] == 56
    mock_nodes["opbnb"].down = True
    resp = await _readyz_until(client, 503, "/readyz/opbnb")  # the probe runs every 0.2 s
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200 and body["ready"], body  # BSC still serves
    assert body["problems"] == ["opbnb: no upstream node in service"]
    _, details = await readyz_details(client.app)
    assert details["networks"]["opbnb"]["upstreams"][0]["error"]
    status, details = await readyz_details(client.app, "/readyz/opbnb")
    assert status == 503 and details["upstreams"][0]["error"]
    assert (await client.get("/readyz/bsc")).status == 200
    assert (await client.get("/readyz/nosuch")).status == 404
    mock_nodes["opbnb"].down = False
    await _readyz_until(client, 200, "/readyz/opbnb")


async def test_readyz_requires_every_network_when_configured(
    make_config: MakeConfig, aiohttp_client: Any, mock_nodes: dict[str, MockNode]
) -> None:
    cfg = make_config({"server": {"ready_requires": ["redis", "all_networks"]}})
    client = await aiohttp_client(create_app(cfg))
    assert (await client.get("/readyz")).status == 200
    mock_nodes["opbnb"].down = True
    resp = await _readyz_until(client, 503)
    assert (await resp.json())["failed_requirements"] == ["all_networks"]
    assert (await client.get("/readyz/bsc")).status == 200


async def _readyz_until(client: Client, status: int, path: str = "/readyz") -> Any:
    async with asyncio.timeout(3):
        while True:
            resp = await client.get(path)
            if resp.status == status:
                return resp
            await asyncio.sleep(0.05)


async def test_readyz_redis_unreachable(make_config: MakeConfig, aiohttp_client: Any) -> None:
    cfg = make_config({"redis": {"url": f"redis://{HOST}:{free_port()}/0"}})
    client = await aiohttp_client(create_app(cfg))
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 503 and body["problems"][0].startswith("redis: ")
    assert body["failed_requirements"] == ["redis"]
    assert body["redis"] == {"ready": False}  # no address on the public port
    status, details = await readyz_details(client.app)
    assert status == 503 and details["redis"]["address"] == cfg.redis.url
    assert details["redis"]["error_class"] and details["redis"]["error"]


async def test_metrics_count_requests_latency_upstream_limits(
    make_config: MakeConfig,
    aiohttp_client: Any,
    api_key: str,
    store: Store,
    account: str,
    mock_nodes: dict[str, MockNode],
) -> None:
    # The cache off: each admitted call is one upstream result to count.
    cfg = make_config(
        {
            "plans": {"free": {"rate": 0.001, "burst": 3}},
            "cache": {"enabled": False, "coalesce": False},
        }
    )
    client = await aiohttp_client(create_app(cfg))
    for _ in range(5):
        await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
    await client.post("/bsc", data=CALL, headers=JSON)  # no key: 401
    assert (await client.get("/metrics")).status == 404  # not on the public port
    status, content_type, text = await scrape(client.app[METRICS])
    assert status == 200
    assert content_type.startswith("text/plain")
    samples = _samples(text)
    labels = (("method", "eth_blockNumber"), ("network", "bsc"))
    assert samples[("gateway_requests_total", (*labels, ("status", "200")))] == 3
    assert samples[("gateway_requests_total", (*labels, ("status", "429")))] == 2
    assert (
        samples[
            ("gateway_requests_total", (("method", "-"), ("network", "bsc"), ("status", "401")))
        ]
        == 1
    )
    assert samples[("gateway_request_duration_seconds_count", (("network", "bsc"),))] == 6
    assert samples[("gateway_rate_limited_total", (("network", "bsc"),))] == 2
    node = (("network", "bsc"), ("node", "bsc-0"))
    assert samples[("gateway_upstream_results_total", (*node, ("result", "ok")))] == 3
    assert samples[("gateway_upstream_healthy", node)] == 1
    assert samples[("gateway_upstream_head_block", node)] == mock_nodes["bsc"].head
    assert ("gateway_open_connections", ()) in samples


async def test_metrics_redis_errors_by_policy(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str
) -> None:
    dead = f"redis://{HOST}:{free_port()}/0"
    for fail_open, status in ((False, 503), (True, 200)):
        cfg = make_config({"redis": {"url": dead, "fail_open": fail_open}})
        client = await aiohttp_client(create_app(cfg))
        resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
        assert resp.status == status
        if status == 503:
            assert (await resp.json())["error"] == {
                "code": -32603,
                "message": "Service unavailable",
            }
        samples = _samples((await scrape(client.app[METRICS]))[2])
        policy = "open" if fail_open else "closed"
        assert samples[("gateway_redis_errors_total", (("policy", policy),))] == 1


async def test_access_log_line(
    make_config: MakeConfig, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with (
        served(make_config()) as srv,
        aiohttp.ClientSession() as session,
        session.post(f"{srv.url}/bsc/{api_key}", data=CALL, headers=JSON) as resp,
    ):
        assert resp.status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.access"]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "http=POST path=/bsc/*** rpc=eth_blockNumber status=200 ms=" in line
    assert "key_id=key_" in line and api_key not in line


async def test_canary_key_in_no_log_line(
    make_config: MakeConfig,
    store: Store,
    mock_nodes: dict[str, MockNode],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every error path of docs/API.md's table with the key in path and header; no log holds it."""
    caplog.set_level(logging.DEBUG)  # every logger, every level
    payg = await store.create_account(
        f"p-{secrets.token_hex(3)}@example.com", "long password", "payg"
    )
    free = await store.create_account(
        f"f-{secrets.token_hex(3)}@example.com", "long password", "free"
    )
    canary, _ = await store.create_key(payg.id, name="canary")
    limited, _ = await store.create_key(free.id, name="limited")
    only_chain, _ = await store.create_key(payg.id, name="m", methods=["eth_chainId"])
    unknown = canary[:-4] + ("AAAA" if not canary.endswith("AAAA") else "BBBB")
    keys = [canary, limited, only_chain, unknown]
    cfg = make_config(
        {
            "plans": {"free": {"rate": 0.001, "burst": 1}},
            "cache": {
                "enabled": False,
                "coalesce": False,
            },  # the node's failures must reach the client
            "limits": {"max_body_bytes": 2048, "upstream_timeout_s": 0.3},
            "upstream": {"attempt_timeout_s": 0.3, "fail_threshold": 1000},
        }
    )
    seen: dict[int, int] = {}
    bodies: list[bytes] = []

    async def send(
        session: aiohttp.ClientSession,
        method: str,
        key: str,
        *,
        data: bytes = CALL,
        headers: dict[str, str] | None = None,
        bearer: str | None = None,
    ) -> int:
        hdrs = {**JSON, "Authorization": f"Bearer {bearer or key}", **(headers or {})}
        async with session.request(method, f"{srv.url}/bsc/{key}", data=data, headers=hdrs) as resp:
            bodies.append(await resp.read())
            seen[resp.status] = seen.get(resp.status, 0) + 1
            return resp.status

    async with served(cfg) as srv, aiohttp.ClientSession() as s:
        assert await send(s, "POST", canary) == 200
        assert await send(s, "POST", canary, bearer=limited) == 401  # path/header mismatch
        assert await send(s, "POST", unknown) == 401  # well-formed, unknown
        assert await send(s, "POST", only_chain) == 403  # method not allowed for the key
        assert await send(s, "GET", canary) == 405
        assert await send(s, "POST", canary, data=b"[" + CALL * 40 + b"]") == 413
        assert await send(s, "POST", canary, headers={"Content-Type": "text/plain"}) == 415
        assert await send(s, "POST", limited) == 200
        assert await send(s, "POST", limited) == 429
        assert await send(s, "POST", canary, data=b"{not json") == 200  # parse error
        mock_nodes["bsc"].down = True
        assert await send(s, "POST", canary) == 502
        mock_nodes["bsc"].down = False
        mock_nodes["bsc"].options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=1000)
        assert await send(s, "POST", canary) == 504
        mock_nodes["bsc"].options = MockNodeOptions(chain_id=56, block_time_s=0)
    dead = make_config({"redis": {"url": f"redis://{HOST}:{free_port()}/0"}})
    async with served(dead) as srv, aiohttp.ClientSession() as s:
        assert await send(s, "POST", canary) == 503
    assert set(seen) == {200, 401, 403, 405, 413, 415, 429, 502, 503, 504}
    assert len(caplog.records) >= len(bodies)  # one access line each, at least
    for record in caplog.records:
        text = record.getMessage() + str(record.args) + str(record.exc_text or "")
        for key in keys:
            assert key not in text, (record.name, text)
    for key in keys:
        assert key not in caplog.text
        assert not any(key.encode() in body for body in bodies)
