"""WebSocket upgrade, auth and calls through the real gateway."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from gateway.demo.mockws import MockWsNode
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.probes import PROBE_BODY
from tests.helpers.served import served
from tests.helpers.wsstack import WsStack, rpc

BAD_AUTH = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": -32001, "message": "Invalid authentication credentials"},
}


async def test_path_key_upgrades_and_calls_work(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 7, "method": "eth_chainId"})
        assert answer == {"jsonrpc": "2.0", "id": 7, "result": "0x38"}
    async with http.ws_connect(f"{stack.ws}/opbnb/{api_key}") as ws:
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": "a", "method": "eth_chainId"})
        assert answer == {"jsonrpc": "2.0", "id": "a", "result": "0xcc"}


async def test_bearer_header_on_the_bare_prefix(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    async with http.ws_connect(f"{stack.ws}/bsc", headers=headers) as ws:
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"})
        assert answer["result"] == hex(stack.chains["bsc"].head)


@pytest.mark.parametrize(
    ("path", "header"),
    [
        ("/bsc", None),  # no key at all
        ("/bsc/short", None),  # malformed
        ("/bsc/" + "A" * 32, None),  # well formed, unknown
        ("/bsc/{key}", "Bearer " + "B" * 32),  # path and header differ
        ("/bsc", "Basic {key}"),  # not a Bearer
    ],
)
async def test_a_bad_key_refuses_the_upgrade_with_401_and_no_socket(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str, path: str, header: str | None
) -> None:
    headers = {"Authorization": header.format(key=api_key)} if header else {}
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(stack.ws + path.format(key=api_key), headers=headers)
    assert err.value.status == 401
    # The same request as a plain handshake shows the body.
    ws_headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        **headers,
    }
    async with http.get(stack.http + path.format(key=api_key), headers=ws_headers) as resp:
        assert resp.status == 401
        assert orjson.loads(await resp.read()) == BAD_AUTH


async def test_revoked_key_cannot_upgrade(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, rec = await store.create_key(account)
    await store.revoke_key(rec.id)
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(f"{stack.ws}/bsc/{key}")
    assert err.value.status == 401


async def test_plain_get_is_still_405(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.get(f"{stack.http}/bsc/{api_key}") as resp:
        assert resp.status == 405
        assert (await resp.json())["error"]["code"] == -32600


async def test_text_and_binary_frames_single_and_batch(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_str('{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}')
        assert orjson.loads((await ws.receive()).data)["result"] == "0x38"
        await ws.send_bytes(b'{"jsonrpc":"2.0","id":2,"method":"net_version"}')
        assert orjson.loads((await ws.receive()).data) == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": "56",
        }
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"},
            {"jsonrpc": "2.0", "id": 2, "method": "admin_peers"},
            {"jsonrpc": "2.0", "id": 3, "method": 5},
            {"jsonrpc": "2.0", "method": "eth_chainId"},  # notification: no answer
            {"jsonrpc": "2.0", "id": 4, "method": "eth_gasPrice"},
        ]
        answer = await rpc(ws, batch)
        assert [a["id"] for a in answer] == [1, 2, 3, 4]
        assert answer[0]["result"] == "0x38"
        assert answer[1]["error"]["code"] == -32601
        assert answer[2]["error"]["code"] == -32600
        assert answer[3]["result"] == "0x3b9aca00"


async def test_bad_frames_answer_with_errors_and_keep_the_socket(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_str("{not json")
        assert orjson.loads((await ws.receive()).data) == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error"},
        }
        assert (await rpc(ws, []))["error"]["code"] == -32600
        assert (await rpc(ws, [1] * 1001))["error"]["code"] == -32600
        deep = b"[" * 100 + b"]" * 100
        await ws.send_bytes(deep)
        assert orjson.loads((await ws.receive()).data)["error"]["code"] == -32600
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 9, "method": "debug_traceTransaction"})
        assert answer["error"]["code"] == -32601 and answer["id"] == 9
        assert (await rpc(ws, {"jsonrpc": "2.0", "id": 10, "method": "eth_chainId"}))["result"]


async def test_node_sees_only_canonical_calls_and_the_client_id_comes_back_exactly(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    node = stack.nodes["bsc"]
    big = b"123456789012345678901234567890"
    raw = (
        b'{"jsonrpc":"2.0","id":' + big + b',"method":"eth_chainId",'
        b'"METHOD":"admin_addPeer","extra":1,"params":[]}'
    )
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_bytes(raw)
        frame = (await ws.receive()).data
        assert frame.encode() == b'{"jsonrpc":"2.0","id":' + big + b',"result":"0x38"}'
    bodies = [b for n in node for b in n.bodies if b"eth_chainId" in b and b != PROBE_BODY]
    assert bodies, "the call never reached a node"
    sent = orjson.loads(bodies[-1])
    assert set(sent) == {"jsonrpc", "id", "method", "params"}
    assert sent["method"] == "eth_chainId" and sent["id"] != int(big)
    assert b"admin" not in bodies[-1] and big not in bodies[-1]


async def test_rate_limit_answers_the_call_and_keeps_the_socket(
    make_config: MakeConfig,
    http: aiohttp.ClientSession,
    api_key: str,
    ws_nodes: dict[str, list[MockWsNode]],
) -> None:
    cfg = make_config(
        # max_wait_s = 0: the refusal itself is what is tested (1 s would let it wait)
        {"plans": {"free": {"rate": 1, "burst": 3, "max_wait_s": 0}}},
        upstreams={name: [n.url for n in group] for name, group in ws_nodes.items()},
    )
    async with served(cfg) as srv, http.ws_connect(f"ws{srv.url[4:]}/bsc/{api_key}") as ws:
        codes = []
        for i in range(5):
            answer = await rpc(ws, {"jsonrpc": "2.0", "id": i, "method": "eth_chainId"})
            assert answer["id"] == i
            codes.append(answer.get("error", {}).get("code"))
        assert codes[:3] == [None, None, None]
        assert codes[3] == -32005
        assert answer["error"]["data"]["retry_after_ms"] > 0
        assert not ws.closed


async def test_method_allowlist_applies_to_socket_calls_and_subscribe(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, methods=["eth_chainId"])
    async with http.ws_connect(f"{stack.ws}/bsc/{key}") as ws:
        assert (await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}))["result"]
        refused = await rpc(
            ws, {"jsonrpc": "2.0", "id": 2, "method": "eth_subscribe", "params": ["newHeads"]}
        )
        assert refused["error"]["code"] == -32001 and refused["id"] == 2
        assert not ws.closed


async def test_origin_allowlist_applies_to_the_upgrade(
    stack: WsStack, http: aiohttp.ClientSession, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, origins=["https://dapp.example"])
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(f"{stack.ws}/bsc/{key}", origin="https://evil.example")
    assert err.value.status == 403
    async with http.ws_connect(f"{stack.ws}/bsc/{key}", origin="https://dapp.example") as ws:
        assert (await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}))["result"]


async def test_websocket_can_be_turned_off(
    make_config: MakeConfig,
    ws_nodes: dict[str, list[MockWsNode]],
    http: aiohttp.ClientSession,
    api_key: str,
) -> None:
    cfg = make_config(
        {"ws": {"enabled": False}},
        upstreams={name: [n.url for n in group] for name, group in ws_nodes.items()},
    )
    async with served(cfg) as srv:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(f"ws{srv.url[4:]}/bsc/{api_key}")
        assert err.value.status == 405
