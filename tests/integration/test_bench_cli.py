"""Harness plumbing: workload templates, the baseline proxy, CLIs and stack helpers."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from bench import mocknode as mock_cli
from bench.__main__ import build_parser
from bench.baseline_proxy import create_app, parse_routes
from bench.scenarios import SCENARIOS
from bench.stack import cpu_plan, parse_cli_json
from bench.workload import Endpoint, make_requests, rpc_body
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node


@pytest.fixture
async def node() -> AsyncIterator[MockNode]:
    n = await start_mock_node(MockNodeOptions(chain_id=204))
    yield n
    await n.close()


def test_requests_interleave_keys_in_path_or_header() -> None:
    ep = Endpoint.from_url("http://gw.local:8545", "/bsc")
    reqs, key_of = make_requests(ep, ["K1", "K2"], methods=("eth_chainId", "eth_call"))
    assert len(reqs) == 4 and key_of == (0, 1, 0, 1)
    assert reqs[0].startswith(b"POST /bsc/K1 HTTP/1.1\r\nHost: gw.local:8545")
    assert reqs[1].startswith(b"POST /bsc/K2 ")
    hdr, _ = make_requests(ep, ["K1"], key_in="header")
    assert hdr[0].startswith(b"POST /bsc HTTP/1.1") and b"Authorization: Bearer K1" in hdr[0]
    with pytest.raises(ValueError):
        Endpoint.from_url("https://x", "/bsc")


def test_batch_bodies() -> None:
    body = orjson.loads(rpc_body(("eth_blockNumber", "eth_getBalance"), 3))
    assert [c["method"] for c in body] == ["eth_blockNumber", "eth_getBalance", "eth_blockNumber"]
    assert [c["id"] for c in body] == [1, 2, 3]
    assert isinstance(orjson.loads(rpc_body(("eth_chainId",), 1)), dict)


async def test_baseline_proxy_relays_bytes(node: MockNode) -> None:
    app = create_app(parse_routes([f"/opbnb={node.url}"]))
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        body = b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"eth_chainId"}'
        async with session.post(server.make_url("/opbnb/somekey"), data=body) as resp:
            assert resp.status == 200
            assert await resp.read() == (
                b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":"0xcc"}'
            )
        async with session.post(server.make_url("/bsc"), data=body) as resp:
            assert resp.status == 404
        await node.close()
        async with session.post(server.make_url("/opbnb"), data=body) as resp:
            assert resp.status == 502


def test_parse_routes() -> None:
    assert parse_routes(["http://a", "/opbnb=http://b"]) == {"": "http://a", "/opbnb": "http://b"}


def test_mocknode_cli_options() -> None:
    args = mock_cli.build_parser().parse_args(
        ["--chain-id", "204", "--latency", "20ms", "--jitter", "5", "--error-rate", "1%",
         "--block-time", "0"]
    )  # fmt: skip
    opts = mock_cli.options_from_args(args)
    assert opts.chain_id == 204 and opts.latency_ms == pytest.approx(20)
    assert opts.latency_jitter_ms == pytest.approx(5) and opts.error_rate == pytest.approx(0.01)
    assert opts.block_time_s == 0


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_parses_with_defaults(scenario: str) -> None:
    args = build_parser().parse_args([scenario])
    assert isinstance(args, argparse.Namespace) and args.duration > 0
    assert args.key_in == "path" and args.procs >= 1


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["burst", "--help"])
    assert exc.value.code == 0
    assert "burst + rate*t" in capsys.readouterr().out


def test_parse_cli_json() -> None:
    assert parse_cli_json('{\n  "id": "k1",\n  "key": "abc"\n}\n')["key"] == "abc"
    assert parse_cli_json('warning: x\n{"id": "k1"}')["id"] == "k1"
    with pytest.raises(ValueError):
        parse_cli_json("no json here")


def test_cpu_plan() -> None:
    assert cpu_plan(pin=False).server is None
    plan = cpu_plan()
    if plan.server is not None:
        assert plan.others and not set(plan.server) & set(plan.others)


def test_help_and_readme_list_every_scenario() -> None:
    """`python -m bench --help` and bench/README.md name every scenario, ws included."""
    helptext = build_parser().format_help()
    readme = (Path(__file__).resolve().parents[2] / "bench" / "README.md").read_text()
    for name in [*SCENARIOS, "ws"]:
        assert f"    {name}" in helptext, name
        assert f"`python -m bench {name}" in readme, name
