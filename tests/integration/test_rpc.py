"""The RPC path through the real app: every row of the error table."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.demo.mocknode import MockNode
from gateway.store.accounts import Store
from tests.helpers.config import Client, MakeConfig
from tests.helpers.lease import until_status
from tests.helpers.probes import forwarded

CALL = {"jsonrpc": "2.0", "id": 7, "method": "eth_chainId", "params": []}
JSON = {"Content-Type": "application/json"}


def fwd(node: MockNode) -> int:
    """Calls forwarded to ``node``, not counting the health probe's."""
    return forwarded(node)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


async def post(client: Client, path: str, body: bytes | Any, **headers: str) -> Any:
    data = body if isinstance(body, bytes) else dumps(body)
    resp = await client.post(path, data=data, headers={**JSON, **headers})
    text = await resp.read()
    return resp, (orjson.loads(text) if text else None)


def assert_error(
    body: Any, code: int, message: str, id_: Any = None, reason: str | bool = False
) -> None:
    """``message``: the table's words. ``reason`` True (any) or the reason's text: the
    message is those words, a colon and the reason, which ``error.data.reason`` holds
    too; False: the bare words."""
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code
    if reason is False:
        assert body["error"]["message"] == message
    else:
        given = body["error"]["data"]["reason"]
        assert given and (reason is True or given == reason), body
        assert body["error"]["message"] == f"{message}: {given}"
    assert body["id"] == id_


# -- keys --------------------------------------------------------------------
@pytest.mark.parametrize("network,chain", [("bsc", "0x38"), ("opbnb", "0xcc")])
async def test_both_key_forms_on_both_networks(
    client: Client, api_key: str, network: str, chain: str
) -> None:
    for path, headers in [
        (f"/{network}/{api_key}", {}),
        (f"/{network}", {"Authorization": f"Bearer {api_key}"}),
        (f"/{network}/{api_key}", {"Authorization": f"Bearer {api_key}"}),
    ]:
        resp, body = await post(client, path, CALL, **headers)
        assert resp.status == 200, (path, body)
        assert body == {"jsonrpc": "2.0", "id": 7, "result": chain}


@pytest.mark.parametrize(
    "path,headers",
    [
        ("/bsc", {}),  # missing
        ("/bsc/short", {}),  # malformed
        ("/bsc/" + "!" * 32, {}),  # malformed, right length
        ("/bsc/" + "A" * 32, {}),  # well formed, unknown
        ("/bsc", {"Authorization": "Basic abc"}),  # wrong scheme
        ("/bsc", {"Authorization": "Bearer "}),  # empty
    ],
)
async def test_bad_keys_are_401(
    client: Client, mock_nodes: dict[str, MockNode], path: str, headers: dict[str, str]
) -> None:
    resp, body = await post(client, path, CALL, **headers)
    assert resp.status == 401
    assert_error(body, -32001, "Invalid authentication credentials", 7)
    assert fwd(mock_nodes["bsc"]) == 0  # nothing reached a node


async def test_path_and_header_keys_must_match(
    client: Client, store: Store, account: str, api_key: str
) -> None:
    other, _ = await store.create_key(account)
    resp, body = await post(client, f"/bsc/{api_key}", CALL, Authorization=f"Bearer {other}")
    assert resp.status == 401
    assert_error(body, -32001, "Invalid authentication credentials", 7)


async def test_revoked_and_expired_keys_are_401(client: Client, store: Store, account: str) -> None:
    key, rec = await store.create_key(account)
    assert (await post(client, f"/bsc/{key}", CALL))[0].status == 200
    await store.revoke_key(rec.id)

    async def status(k: str) -> int:
        resp, _ = await post(client, f"/bsc/{k}", CALL)
        code: int = resp.status
        return code

    await until_status(lambda: status(key), 401)
    rotated_key, rec2 = await store.create_key(account)
    await store.rotate_key(rec2.id, grace_ms=0)
    await until_status(lambda: status(rotated_key), 401)


async def test_malformed_key_costs_no_redis_round_trip(client: Client, redis: Any) -> None:
    """A malformed key is refused before Redis is asked. The app's background loops
    (cordon watcher, alert evaluator, usage flushes) speak to the same Redis now and
    then, so the count allows a few of theirs; a round trip per refusal would add at
    least one command for each of the calls."""
    calls = 200
    before = (await redis.info("stats"))["total_commands_processed"]
    for _ in range(calls):
        resp, _ = await post(client, "/bsc/not-a-key", CALL)
        assert resp.status == 401
    after = (await redis.info("stats"))["total_commands_processed"]
    assert after - before < calls // 10, after - before


# -- allowlists ---------------------------------------------------------------
async def test_allowlist_refusals_are_403(
    client: Client, store: Store, account: str, mock_nodes: dict[str, MockNode]
) -> None:
    key, _ = await store.create_key(
        account, origins=["https://dapp.example"], methods=["eth_chainId"]
    )
    resp, body = await post(client, f"/bsc/{key}", CALL, Origin="https://dapp.example")
    assert resp.status == 200
    before = fwd(mock_nodes["bsc"])
    resp, body = await post(client, f"/bsc/{key}", CALL, Origin="https://evil.example")
    assert resp.status == 403
    words = "Invalid authentication credentials"
    assert_error(body, -32001, words, 7, "this key does not allow origin https://evil.example")
    call = {**CALL, "method": "eth_blockNumber"}
    resp, body = await post(client, f"/bsc/{key}", call, Origin="https://dapp.example")
    assert resp.status == 403
    assert_error(body, -32001, words, 7, "this key does not allow method eth_blockNumber")
    assert fwd(mock_nodes["bsc"]) == before


@pytest.mark.parametrize("mode", ["lease", "exact"])
async def test_a_403_names_the_allowlist_that_refused(
    make_config: MakeConfig, aiohttp_client: Any, store: Store, account: str, mode: str
) -> None:
    """The key exists, so saying which list refused tells its holder nothing new;
    admit.lua (exact) and the leased path (lease) say it alike."""
    client: Client = await aiohttp_client(create_app(make_config({"admission": {"mode": mode}})))
    words = "Invalid authentication credentials"
    key, _ = await store.create_key(account, origins=["https://dapp.example"])
    resp, body = await post(client, f"/bsc/{key}", CALL)
    assert resp.status == 403
    reason = "this key allows only listed origins, and the request sent no Origin"
    assert_error(body, -32001, words, 7, reason)
    key, _ = await store.create_key(account, methods=["eth_chainId"])
    resp, body = await post(client, f"/bsc/{key}", [{**CALL, "method": "eth_getBalance"}])
    assert resp.status == 403
    assert_error(body[0], -32001, words, 7, "this key does not allow method eth_getBalance")
    key, _ = await store.create_key(account, ips=["192.0.2.0/24"])
    resp, body = await post(client, f"/bsc/{key}", CALL)
    assert_error(body, -32001, words, 7, "this key does not allow IP 127.0.0.1")
    # an unknown key: the bare words, whatever was wrong with it
    resp, body = await post(client, f"/bsc/{key[:-4]}abcd", CALL, Origin="https://x.example")
    assert resp.status == 401
    assert_error(body, -32001, words, 7)


async def test_ip_allowlist_uses_peer_address(client: Client, store: Store, account: str) -> None:
    ok, _ = await store.create_key(account, ips=["127.0.0.0/8"])
    bad, _ = await store.create_key(account, ips=["192.0.2.0/24"])
    assert (await post(client, f"/bsc/{ok}", CALL))[0].status == 200
    resp, body = await post(client, f"/bsc/{bad}", CALL)
    assert resp.status == 403
    reason = "this key does not allow IP 127.0.0.1"
    assert_error(body, -32001, "Invalid authentication credentials", 7, reason)


# -- rate limits -------------------------------------------------------------
@pytest.fixture
async def tight(make_config: MakeConfig, aiohttp_client: Any) -> Client:
    cfg = make_config({"plans": {"free": {"rate": 0.5, "burst": 3}}})
    result: Client = await aiohttp_client(create_app(cfg))
    return result


async def test_rate_limit_429_with_retry_after_and_headers(tight: Client, api_key: str) -> None:
    for i in range(3):
        resp, _ = await post(tight, f"/bsc/{api_key}", CALL)
        assert resp.status == 200
        assert resp.headers["RateLimit-Policy"] == "3;w=6"
        assert resp.headers["RateLimit"].startswith(f"limit=3, remaining={2 - i}, reset=")
    resp, body = await post(tight, f"/bsc/{api_key}", CALL)
    assert resp.status == 429
    assert_error(body, -32005, "Rate limit exceeded", 7, "the plan's rate reached")
    assert 1000 <= body["error"]["data"]["retry_after_ms"] <= 2000
    assert resp.headers["Retry-After"] == "2"
    assert resp.headers["RateLimit"].startswith("limit=3, remaining=0")
    assert "RateLimit-Policy" in resp.headers


async def test_batch_is_admitted_call_by_call(
    tight: Client, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    batch = [{**CALL, "id": i} for i in range(4)]  # costs 4 > burst 3: three fit
    resp, body = await post(tight, f"/bsc/{api_key}", batch)
    assert resp.status == 200 and [b["id"] for b in body] == [0, 1, 2, 3]
    assert [b.get("result") for b in body[:3]] == ["0x38"] * 3
    assert body[3]["error"]["code"] == -32005 and body[3]["error"]["data"]["reason"]
    assert resp.headers["RateLimit"].startswith("limit=3, remaining=0")
    before = fwd(mock_nodes["bsc"])
    resp, body = await post(tight, f"/bsc/{api_key}", batch[:3])  # none fits now
    assert resp.status == 429 and [b["id"] for b in body] == [0, 1, 2]
    assert all(b["error"]["code"] == -32005 for b in body)
    assert fwd(mock_nodes["bsc"]) == before


# -- body problems ------------------------------------------------------------
async def test_parse_error(client: Client, api_key: str) -> None:
    resp, body = await post(client, f"/bsc/{api_key}", b'{"jsonrpc": "2.0", "id": 1,')
    assert resp.status == 200
    assert_error(body, -32700, "Parse error", None)


async def test_parse_error_without_a_key_is_still_401(client: Client) -> None:
    resp, body = await post(client, "/bsc", b"{nope")
    assert resp.status == 401
    assert_error(body, -32001, "Invalid authentication credentials", None)


@pytest.mark.parametrize(
    "call,id_",
    [
        ({"jsonrpc": "1.0", "id": 3, "method": "eth_chainId"}, 3),
        ({"id": 3, "method": "eth_chainId"}, 3),
        ({"jsonrpc": "2.0", "id": 3, "method": 5}, 3),
        ({"jsonrpc": "2.0", "id": 3, "method": "eth_chainId", "params": "x"}, 3),
        ({"jsonrpc": "2.0", "id": [1], "method": "eth_chainId"}, None),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "eth_chainId"}, None),
        ("just a string", None),
        (42, None),
    ],
)
async def test_invalid_request_objects(client: Client, api_key: str, call: Any, id_: Any) -> None:
    resp, body = await post(client, f"/bsc/{api_key}", call)
    assert resp.status == 200
    assert_error(body, -32600, "Invalid Request", id_, reason=True)


async def test_empty_and_oversized_batches(client: Client, api_key: str) -> None:
    resp, body = await post(client, f"/bsc/{api_key}", [])
    assert resp.status == 200
    assert_error(body, -32600, "Invalid Request", None, "empty batch")
    resp, body = await post(client, f"/bsc/{api_key}", [CALL] * 1001)
    assert resp.status == 200
    reason = "a batch holds at most 1000 calls, this one 1001"
    assert_error(body, -32600, "Invalid Request", None, reason)
    # viem's default batch (up to 1000 calls) is not refused for its size
    resp, answer = await post(client, f"/bsc/{api_key}", [CALL] * 150)
    assert resp.status == 200 and type(answer) is list and len(answer) == 150
    assert all(item.get("error", {}).get("code") != -32600 for item in answer)


@pytest.mark.parametrize(
    "method",
    [
        "admin_peers",
        "debug_traceTransaction",
        "personal_sign",
        "eth_sign",
        "eth_sendTransaction",
        "miner_start",
        "txpool_content",
        "eth_nonexistent",
    ],
)
async def test_methods_not_offered(
    client: Client, api_key: str, mock_nodes: dict[str, MockNode], method: str
) -> None:
    resp, body = await post(client, f"/bsc/{api_key}", {**CALL, "method": method})
    assert resp.status == 200
    assert_error(body, -32601, f"the method {method} does not exist/is not available", 7)
    assert fwd(mock_nodes["bsc"]) == 0


async def test_body_over_limit_is_413(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str
) -> None:
    client: Client = await aiohttp_client(
        create_app(make_config({"limits": {"max_body_bytes": 1000}}))
    )
    big = {**CALL, "params": ["x" * 2000]}
    resp, body = await post(client, f"/bsc/{api_key}", big)
    assert resp.status == 413
    assert_error(body, -32600, "Invalid Request", None, "body exceeds 1000 bytes")

    async def chunks() -> Any:  # no Content-Length: the limit holds while reading
        for _ in range(5):
            yield b"[" + b" " * 400

    resp = await client.post(f"/bsc/{api_key}", data=chunks(), headers=JSON)
    assert resp.status == 413


@pytest.mark.parametrize(
    "ctype,status",
    [
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        ("application/json; charset=utf-8", 200),
        ("application/JSON", 200),
        (None, 200),
    ],
)
async def test_content_types(client: Client, api_key: str, ctype: str | None, status: int) -> None:
    headers = {} if ctype is None else {"Content-Type": ctype}
    resp = await client.post(
        f"/bsc/{api_key}", data=dumps(CALL), headers=headers, skip_auto_headers=["Content-Type"]
    )
    assert resp.status == status
    if status == 415:
        reason = "Content-Type must be application/json"
        assert_error(await resp.json(content_type=None), -32600, "Invalid Request", None, reason)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_not_post_is_405(client: Client, api_key: str, method: str) -> None:
    resp = await client.request(method, f"/bsc/{api_key}")
    assert resp.status == 405
    assert "POST" in resp.headers["Allow"]
    assert_error(await resp.json(), -32600, "Invalid Request", None, "use POST")


# -- upstream failures ---------------------------------------------------------
async def test_every_upstream_down_is_502(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    mock_nodes["bsc"].down = True
    client: Client = await aiohttp_client(create_app(make_config()))
    resp, body = await post(client, f"/bsc/{api_key}", CALL)
    assert resp.status == 502
    assert_error(body, -32603, "Upstream unavailable", 7)
    resp, body = await post(client, f"/bsc/{api_key}", [CALL, {**CALL, "id": 8}])
    assert resp.status == 502 and [b["id"] for b in body] == [7, 8]


async def test_slow_upstream_is_504(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    import dataclasses

    client: Client = await aiohttp_client(
        create_app(make_config({"limits": {"upstream_timeout_s": 0.3}}))
    )
    # slow once in service (a node too slow for its start-up check gets no calls: 502)
    mock_nodes["bsc"].options = dataclasses.replace(mock_nodes["bsc"].options, latency_ms=2000)
    resp, body = await post(client, f"/bsc/{api_key}", CALL)
    assert resp.status == 504
    assert_error(body, -32603, "Upstream timeout", 7)


# -- ids -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw_id",
    [
        b"0",
        b"-0",
        b"-1",
        b"9223372036854775807",
        b"18446744073709551616",
        b"123456789012345678901234567890123456789",
        b"-99999999999999999999999",
        b'"abc"',
        b'""',
        b'"0x1f"',
        b"null",
        b"1.5",
        b"1e3",
    ],
)
async def test_ids_echoed_exactly(client: Client, api_key: str, raw_id: bytes) -> None:
    good = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"eth_chainId"}'
    bad = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"debug_x"}'
    for path in (f"/bsc/{api_key}", "/bsc/" + "Z" * 32):
        for body in (good, bad):
            resp = await client.post(path, data=body, headers=JSON)
            text = await resp.read()
            assert b'"id":' + raw_id + b"," in text, (path, body, text)


async def test_escaped_string_ids_come_back_as_the_same_string(
    client: Client, api_key: str
) -> None:
    # Nodes re-encode strings, so escapes come back as the same string value.
    for method in ("eth_chainId", "debug_x"):
        body = b'{"jsonrpc":"2.0","id":"\\u00e9\\ud83d\\ude00","method":"' + method.encode() + b'"}'
        resp = await client.post(f"/bsc/{api_key}", data=body, headers=JSON)
        assert (await resp.json())["id"] == "\u00e9\U0001f600"


async def test_big_int_id_in_a_batch_with_errors(client: Client, api_key: str) -> None:
    body = (
        b'[{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"eth_chainId"},'
        b'{"jsonrpc":"2.0","id":98765432109876543210987654321,"method":"debug_x"}]'
    )
    resp = await client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    text = await resp.read()
    assert resp.status == 200
    assert text.index(b"123456789012345678901234567890") < text.index(
        b"98765432109876543210987654321"
    )
    assert b'"result":"0x38"' in text and b'"code":-32601' in text


# -- batches and notifications ------------------------------------------------
async def test_batch_mix_keeps_order_and_forwards_valid_calls(
    client: Client, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"},
        {"jsonrpc": "2.0", "id": 2, "method": "debug_x"},
        {"jsonrpc": "2.0", "id": "three", "method": "net_version"},
        7,
        {"jsonrpc": "2.0", "method": "eth_gasPrice"},  # notification
        {"jsonrpc": "2.0", "id": 5, "method": 1},
    ]
    resp, body = await post(client, f"/bsc/{api_key}", batch)
    assert resp.status == 200
    assert [b["id"] for b in body] == [1, 2, "three", None, 5]
    assert body[0]["result"] == "0x38" and body[2]["result"] == "56"
    assert body[1]["error"]["code"] == -32601
    assert body[3]["error"]["code"] == -32600 and body[4]["error"]["code"] == -32600
    assert fwd(mock_nodes["bsc"]) == 3  # the two valid calls and the notification


async def test_all_valid_batch_is_forwarded_as_is(client: Client, api_key: str) -> None:
    batch = [{**CALL, "id": i} for i in range(10)]
    resp, body = await post(client, f"/opbnb/{api_key}", batch)
    assert resp.status == 200 and [b["result"] for b in body] == ["0xcc"] * 10


async def test_notifications_get_204(
    client: Client, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    note = {"jsonrpc": "2.0", "method": "eth_gasPrice", "params": []}
    resp = await client.post(f"/bsc/{api_key}", data=dumps(note), headers=JSON)
    assert resp.status == 204 and await resp.read() == b""
    resp = await client.post(f"/bsc/{api_key}", data=dumps([note, note]), headers=JSON)
    assert resp.status == 204
    assert fwd(mock_nodes["bsc"]) == 3
    # a notification of a method we do not offer: no answer, nothing forwarded
    resp = await client.post(
        f"/bsc/{api_key}", data=dumps({**note, "method": "debug_x"}), headers=JSON
    )
    assert resp.status == 204
    assert fwd(mock_nodes["bsc"]) == 3


async def test_auth_failure_in_batch_is_one_error_per_call(client: Client) -> None:
    batch = [{**CALL, "id": 1}, {**CALL, "id": "b"}, {"jsonrpc": "2.0", "method": "x"}]
    resp, body = await post(client, "/bsc/" + "Q" * 32, batch)
    assert resp.status == 401
    assert [b["id"] for b in body] == [1, "b", None]
    assert {b["error"]["code"] for b in body} == {-32001}


# -- CORS --------------------------------------------------------------------------
async def test_cors_on_rpc_paths(client: Client, api_key: str) -> None:
    resp = await client.options(
        "/bsc",
        headers={
            "Origin": "https://dapp.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in resp.headers["Access-Control-Allow-Headers"]
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    resp, _ = await post(client, f"/bsc/{api_key}", CALL, Origin="https://dapp.example")
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "RateLimit" in resp.headers["Access-Control-Expose-Headers"]
    assert "Set-Cookie" not in resp.headers


async def test_no_cors_elsewhere(client: Client) -> None:
    for path in ("/healthz", "/metrics"):
        resp = await client.get(path, headers={"Origin": "https://dapp.example"})
        assert "Access-Control-Allow-Origin" not in resp.headers
        resp = await client.options(
            path, headers={"Origin": "https://dapp.example", "Access-Control-Request-Method": "GET"}
        )
        assert "Access-Control-Allow-Origin" not in resp.headers


async def test_odd_formatting_is_answered_in_the_usual_shape(client: Client, api_key: str) -> None:
    # odd but valid formatting and key order: the node gets the canonical form
    raw = b'{ "method" : "eth_chainId", "params":[], "id" : 1 , "jsonrpc":"2.0"}'
    resp = await client.post(f"/bsc/{api_key}", data=raw, headers=JSON)
    assert resp.status == 200
    assert await resp.read() == b'{"jsonrpc":"2.0","id":1,"result":"0x38"}'


async def test_forwarded_for_only_from_trusted_proxies(
    make_config: MakeConfig, aiohttp_client: Any, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, ips=["203.0.113.0/24"])
    trusting: Client = await aiohttp_client(
        create_app(make_config({"server": {"trusted_proxies": ["127.0.0.0/8"]}}))
    )
    resp, _ = await post(
        trusting, f"/bsc/{key}", CALL, **{"X-Forwarded-For": "198.51.100.7, 203.0.113.9"}
    )
    assert resp.status == 200
    resp, _ = await post(trusting, f"/bsc/{key}", CALL, **{"X-Forwarded-For": "198.51.100.7"})
    assert resp.status == 403
    plain: Client = await aiohttp_client(create_app(make_config()))
    resp, _ = await post(plain, f"/bsc/{key}", CALL, **{"X-Forwarded-For": "203.0.113.9"})
    assert resp.status == 403  # a client cannot forge its address


async def test_in_flight_cap_queues_instead_of_failing(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    import asyncio
    import dataclasses

    from gateway import typedefs as T

    mock_nodes["bsc"].options = dataclasses.replace(mock_nodes["bsc"].options, latency_ms=50)
    app = create_app(make_config({"limits": {"max_in_flight": 2}}))
    client: Client = await aiohttp_client(app)
    results = await asyncio.gather(
        *(post(client, f"/bsc/{api_key}", {**CALL, "id": i}) for i in range(12))
    )
    assert [body["id"] for _, body in results] == list(range(12))
    assert all(resp.status == 200 for resp, _ in results)
    from gateway.upstream.transport import LeanTransport

    transport = app[T.POOLS]["bsc"].nodes[0].transport
    assert isinstance(transport, LeanTransport) and transport.client.open_connections <= 2


async def test_notification_answer_carries_cors(client: Client, api_key: str) -> None:
    note = {"jsonrpc": "2.0", "method": "eth_gasPrice", "params": []}
    resp = await client.post(f"/bsc/{api_key}", data=dumps(note), headers=JSON)
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
