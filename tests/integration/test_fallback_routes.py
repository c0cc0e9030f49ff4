"""Paths no route serves: a JSON-RPC 404 (not aiohttp's text), and /favicon.ico."""

from __future__ import annotations

import orjson

from tests.helpers.config import Client


async def test_an_unknown_path_answers_a_json_rpc_404(client: Client) -> None:
    for method, path in (
        ("POST", "/eth/abc"),
        ("POST", "/v1/bsc"),
        ("GET", "/x"),
        ("PUT", "/nope"),
    ):
        resp = await client.request(method, path, data=b'{"jsonrpc":"2.0","id":1}')
        assert resp.status == 404, path
        assert resp.headers["Content-Type"].startswith("application/json")
        assert "Access-Control-Allow-Origin" not in resp.headers  # CORS: RPC paths only
        body = orjson.loads(await resp.read())
        assert body["jsonrpc"] == "2.0" and body["id"] is None, body
        assert body["error"]["code"] == -32600
        reason = body["error"]["data"]["reason"]
        assert "/bsc" in reason and "/opbnb" in reason
        assert body["error"]["message"].endswith(reason)  # the reason in the message too


async def test_routes_that_exist_keep_their_answers(client: Client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz/nosuch")).status == 404  # its own JSON, not the fallback
    resp = await client.get("/bsc/")  # under a network's prefix: a malformed key
    assert resp.status == 401
    resp = await client.get("/metrics")  # never on the public port
    assert resp.status == 404


async def test_favicon_is_an_icon(client: Client) -> None:
    resp = await client.get("/favicon.ico")
    assert resp.status == 200 and resp.headers["Content-Type"] == "image/x-icon"
    data = await resp.read()
    assert data[:4] == b"\x00\x00\x01\x00" and len(data) > 1000  # ICO header, one 16x16 image
