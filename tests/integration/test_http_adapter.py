"""The HTTP adapter's own doors: a body that is not what its
Content-Encoding says, and any method on a path with no key."""

from __future__ import annotations

import orjson
import pytest

from tests.helpers.config import Client

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_is_not_its_content_encoding_is_a_400_json_rpc_error(
    client: Client, api_key: str, encoding: str
) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=headers)
    assert resp.status == 400
    body = orjson.loads(await resp.read())
    assert body["id"] is None and body["error"]["code"] == -32600
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    # (aiohttp's lingering read of the rest of the body still logs the decode
    # error once; that is the server protocol's, fixed there.)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/bsc/", "/bsc/{key}/extra"])
async def test_any_method_on_a_path_without_a_key_is_401(
    client: Client, api_key: str, method: str, path: str
) -> None:
    resp = await client.request(method, path.format(key=api_key))
    assert resp.status == 401
    assert orjson.loads(await resp.read())["error"]["code"] == -32001
