"""Every finding of the fuzzer, kept as a plain regression test.

Each goes through the real server (``GatewayRunner`` on a free port, real
Redis, real mock nodes) over a raw socket, so it holds whatever the handler
looks like inside. "Log lines" here are the gateway's own log records; the
access log (one line per request, switchable) is not counted.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config import Config
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401  (both doors)
from tests.helpers.rawhttp import RawResponse, aexchange, request
from tests.helpers.served import Served, served

CALL = {"jsonrpc": "2.0", "id": 7, "method": "eth_chainId", "params": []}
BODY = json.dumps(CALL).encode()


@pytest.fixture
def fuzz_config(make_config: MakeConfig) -> Config:
    return make_config({"server": {"metrics_listen": ""}})


@pytest.fixture
async def gw(fuzz_config: Config) -> AsyncIterator[Served]:
    async with served(fuzz_config) as s:
        yield s


def _own_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name != "gateway.access"]


def _rpc_error(resp: RawResponse) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json"), resp
    answer = json.loads(resp.body)
    assert answer["jsonrpc"] == "2.0" and "error" in answer, answer
    err: dict[str, Any] = answer["error"]
    return err


# -- a body that is not what its Content-Encoding says ------------
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "GZIP"])
@pytest.mark.parametrize("keyed", [True, False])
async def test_body_not_its_content_encoding_is_a_clean_400(
    gw: Served, api_key: str, caplog: pytest.LogCaptureFixture, encoding: str, keyed: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    path = f"/bsc/{api_key}" if keyed else "/bsc"
    data = request(path, BODY, headers={"Content-Encoding": encoding})
    (resp,), closed = await aexchange(gw.port, data, want=0)  # read to the close
    assert closed and resp.status == 400
    err = _rpc_error(resp)
    assert err["code"] == -32600
    assert err["message"] == "Invalid Request: body does not match its Content-Encoding"
    assert resp.headers.get("connection") == "close"  # the parser stopped: no reuse
    records = _own_records(caplog)
    assert len(records) <= 1, [r.getMessage() for r in records]
    assert not any(r.exc_info for r in caplog.records)
    assert "Traceback" not in caplog.text


async def test_a_true_gzip_body_still_works(gw: Served, api_key: str) -> None:
    """The control: what the encoding says, the gateway reads."""
    data = request(f"/bsc/{api_key}", zlib.compress(BODY), headers={"Content-Encoding": "deflate"})
    (resp,), _ = await aexchange(gw.port, data)
    assert resp.status == 200 and json.loads(resp.body) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": "0x38",
    }


# -- small doors ------------------------------------------------
async def test_unknown_expect_gets_a_json_rpc_417(
    gw: Served, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    data = request(f"/bsc/{api_key}", BODY, headers={"Expect": "200-ok"})
    (resp,), _ = await aexchange(gw.port, data)
    assert resp.status == 417
    err = _rpc_error(resp)
    assert err["code"] == -32600
    assert "200-ok" not in resp.body.decode()  # the header is not echoed
    # CORS like every RPC answer, so a browser's fetch sees the error
    assert resp.headers.get("access-control-allow-origin") == "*", resp.headers
    assert not _own_records(caplog)


async def test_expect_100_continue_still_answers(gw: Served, api_key: str) -> None:
    data = request(f"/bsc/{api_key}", BODY, headers={"Expect": "100-continue"})
    (resp,), _ = await aexchange(gw.port, data)
    assert resp.status == 200 and json.loads(resp.body)["result"] == "0x38"


async def test_lone_surrogate_in_an_unknown_member_is_ignored(gw: Served, api_key: str) -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"eth_chainId","params":[],"x":"\\ud800"}'
    (resp,), _ = await aexchange(gw.port, request(f"/bsc/{api_key}", body))
    assert resp.status == 200
    assert resp.body == b'{"jsonrpc":"2.0","id":7,"result":"0x38"}'


async def test_lone_surrogate_does_not_sink_its_batch(gw: Served, api_key: str) -> None:
    body = (
        b'[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","\\udfff":1},'
        b'{"jsonrpc":"2.0","id":"two","method":"eth_chainId","x":["\\ud800"]},'
        b'"\\ud800"]'
    )
    (resp,), _ = await aexchange(gw.port, request(f"/bsc/{api_key}", body))
    assert resp.status == 200
    answers = json.loads(resp.body)
    assert [a.get("result") for a in answers[:2]] == ["0x38", "0x38"]
    assert [a["id"] for a in answers] == [1, "two", None]
    assert answers[2]["error"]["code"] == -32600


async def test_lone_surrogate_in_params_is_still_a_parse_error(gw: Served, api_key: str) -> None:
    """What would reach a node cannot hold it (no UTF-8 for it): refused, never forwarded."""
    body = b'{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["\\ud800","latest"]}'
    (resp,), _ = await aexchange(gw.port, request(f"/bsc/{api_key}", body))
    assert resp.status == 200 and _rpc_error(resp)["code"] == -32700


@pytest.mark.parametrize("garbage", [b"GARBAGE / HTTP/1.1\r\n\r\n", b"\x00\x01\x02\r\n\r\n"])
async def test_pipelined_calls_before_a_malformed_request_are_answered(
    gw: Served, api_key: str, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    caplog.set_level(logging.DEBUG)
    calls = [dict(CALL, id=i) for i in (1, 2, 3)]
    data = b"".join(request(f"/bsc/{api_key}", json.dumps(c).encode()) for c in calls)
    responses, closed = await aexchange(gw.port, data + garbage, want=0)
    assert closed
    assert [r.status for r in responses] == [200, 200, 200, 400]
    assert [json.loads(r.body)["id"] for r in responses[:3]] == [1, 2, 3]
    assert _rpc_error(responses[3])["code"] == -32600
    assert len(_own_records(caplog)) <= 1


async def test_many_pipelined_calls_in_one_write_are_all_answered(gw: Served, api_key: str) -> None:
    """More than aiohttp's queue (32) in one write: the parser pauses and resumes in order."""
    n = 80
    data = b"".join(
        request(f"/bsc/{api_key}", json.dumps(dict(CALL, id=i)).encode()) for i in range(n)
    )
    responses, _ = await aexchange(gw.port, data, want=n, timeout_s=30)
    assert [json.loads(r.body)["id"] for r in responses] == list(range(n))
