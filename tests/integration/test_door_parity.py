"""The lean door against the application door: the same bytes in, the same bytes out.

One gateway serves both doors on two listeners (``tests.helpers.bothdoors``),
so nothing but the door differs. Each example is sent to the application
door, then to the lean door, over raw sockets; the answers must be equal
byte for byte once ``Date`` is masked, and the digits of ``RateLimit``
(each send spends from the same key, so the second sees one less).

The corpus is the fuzzer's (tests/helpers/fuzzinput.py: bodies,
encodings, content types, ``Expect``, paths, auth, methods, chunked
framing, pipelined calls ending in garbage) plus the bad-input tests'
framing cases below. ``FUZZ_EXAMPLES`` / ``FUZZ_RANDOM=1`` widen it as for
the fuzzer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import socket
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from argon2 import PasswordHasher
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway import typedefs as T
from gateway.demo.nodeoptions import MockNodeOptions
from gateway.redis import keyspace as ks
from gateway.redis.embedded import RedisProcess
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.bothdoors import BothDoors, both_doors
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors as door_param  # noqa: F401  (the async tests' door)
from tests.helpers.doors import door_make_config  # noqa: F401
from tests.helpers.fuzzinput import (
    GARBAGE,
    FuzzRequest,
    budget,
    chunked,
    dumps,
    http_requests,
    valid_calls,
)
from tests.helpers.rawhttp import aexchange, request, split_responses
from tests.helpers.served import served

_DATE = re.compile(rb"\r\nDate: [^\r]*")
_COUNTERS = re.compile(rb"(\r\nRateLimit: [^\r]*)")


@pytest.fixture(scope="module")
def doors(redis_server: RedisProcess) -> Iterator[BothDoors]:
    with both_doors(redis_server.url) as d:
        yield d


def _masked(raw: bytes) -> bytes:
    raw = _DATE.sub(b"\r\nDate: -", raw)
    return _COUNTERS.sub(lambda m: re.sub(rb"=\d+", b"=N", m.group(1)), raw)


def _exchange(port: int, data: bytes, want: int, timeout_s: float = 10.0) -> tuple[bytes, bool]:
    """Everything the server wrote until ``want`` whole responses, or its close."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        while deadline > time.monotonic():
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                return buf, True
            if not chunk:
                return buf, True
            buf += chunk
            if len(split_responses(buf)[0]) >= want > 0:
                return buf, False
    return buf, False


def _same(doors: BothDoors, data: bytes, want: int = 1) -> bytes:
    """Send ``data`` to both doors; assert the same answer bytes; return them."""
    app, app_closed = _exchange(doors.app_port, data, want)
    lean, lean_closed = _exchange(doors.lean_port, data, want)
    assert len(split_responses(app)[0]) >= want, (data[:300], app[:600])
    assert _masked(lean) == _masked(app), (data[:300], app[:600], lean[:600])
    if want == 0:  # read to the close: both closed
        assert app_closed == lean_closed
    return app


@budget(200)
@given(req=http_requests(max_cut=300))
def test_one_request_same_bytes_from_both_doors(doors: BothDoors, req: FuzzRequest) -> None:
    _same(doors, req.wire(doors.key))


@budget(100)
@given(
    batch=st.lists(valid_calls, min_size=1, max_size=6),
    garbage=GARBAGE,
    path=st.sampled_from(["/bsc/{k}", "/opbnb/{k}", "/bsc"]),
)
def test_pipelined_same_bytes_from_both_doors(
    doors: BothDoors, batch: list[dict[str, Any]], garbage: bytes, path: str
) -> None:
    data = b"".join(request(path.format(k=doors.key), dumps(c)) for c in batch) + garbage
    _same(doors, data, want=len(batch) + (1 if garbage else 0))


CALL = b'{"jsonrpc":"2.0","id":7,"method":"eth_chainId","params":[]}'


def _framing_cases(key: str) -> list[tuple[bytes, int]]:
    """The bad-input tests' framing: (request bytes, responses to wait for; 0: the close)."""
    path = f"/bsc/{key}"
    big = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["' + b"x" * 1_100_000 + b'"]}'
    return [
        (request(path, CALL), 1),
        (request("/bsc", CALL, headers={"Authorization": f"Bearer {key}"}), 1),
        (request(path, CALL, headers={"Content-Encoding": "gzip"}), 0),  # not gzip: 400, close
        (request(path, zlib.compress(CALL), headers={"Content-Encoding": "deflate"}), 1),
        (request(path, CALL, headers={"Expect": "100-continue"}), 1),
        (request(path, CALL, headers={"Expect": "200-ok"}), 0),  # 417 and close
        (request(path, CALL, headers={"Content-Type": "text/plain"}), 1),  # 415
        (request(path, big), 1),  # 413 from the declared length
        (
            request(path, chunked(big, [1000, 500_000]), headers={"Transfer-Encoding": "chunked"}),
            1,
        ),  # 413 after reading
        (request(path, b"[" + b",".join([CALL] * 1001) + b"]"), 1),  # batch limit
        (request(path, CALL, method="GET"), 1),  # 405 (the application's)
        (request(path, CALL, method="OPTIONS"), 1),  # preflight (the application's)
        (request(path, CALL, headers={"Origin": "https://dapp.example"}), 1),
        (request(path, CALL, headers={"X-Forwarded-For": "203.0.113.9"}), 1),
        (request(path, CALL, headers={"Connection": "close"}), 0),
        (request(path + "/extra", CALL), 1),
        (request(path, CALL) + b"GARBAGE / HTTP/1.1\r\n\r\n", 2),
        (request(path, b"not json"), 1),
        (request(path, b""), 1),
    ]


def test_framing_cases_same_bytes_from_both_doors(doors: BothDoors) -> None:
    taken = doors.door.taken
    for data, want in _framing_cases(doors.key):
        _same(doors, data, want)
    assert doors.door.taken > taken  # the lean door answered these itself


def test_lean_door_answers_rpc_posts_and_hands_the_rest_over(doors: BothDoors) -> None:
    before = doors.door.taken
    _same(doors, request(f"/bsc/{doors.key}", CALL), 1)
    assert doors.door.taken == before + 1
    raw = _same(doors, request("/healthz", b"", method="GET"), 1)  # the application's
    assert doors.door.taken == before + 1
    assert raw.startswith(b"HTTP/1.1 200 ")
    answer = json.loads(
        split_responses(_same(doors, request(f"/bsc/{doors.key}", CALL), 1))[0][0].body
    )
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": "0x38"}


NOT_OFFERED = b'{"jsonrpc":"2.0","id":3,"method":"debug_nope","params":[]}'
ACCESS = re.compile(
    r"access remote=127\.0\.0\.1 http=POST path=/bsc/\*\*\* rpc=- status=200 "
    r"ms=[0-9.]+ key_id=\S+ cache=miss node=gateway"
)


async def test_access_log_metrics_and_insight_on_either_door(
    make_config: MakeConfig,
    api_key: str,
    redis: Redis,
    prefix: str,
    door: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.access")
    async with served(make_config({"server": {"metrics_listen": ""}})) as s:
        assert s.app[T.CONFIG].server.door == door
        data = request(f"/bsc/{api_key}", NOT_OFFERED)
        (resp,), _ = await aexchange(s.port, data)
        assert json.loads(resp.body)["error"]["code"] == -32601
        lines = [r.getMessage() for r in caplog.records if r.name == "gateway.access"]
        assert len(lines) == 1 and ACCESS.fullmatch(lines[0]), lines
        await s.app[T.INSIGHT].flush()
    entries: Any = await redis.xrange(ks.insight_log(prefix, key_hash(api_key)))
    assert [e[1]["method"] for e in entries] == ["debug_nope"]
    assert entries[0][1]["code"] == "-32601"


# -- the error paths: the same bytes from both doors when things go wrong ------
# Each hostile network has one in-process node; the gateway's health probe is
# answered honestly (``spare_probes``) so the node stays in service and the
# clients' calls meet the fault.
_ODD = b'{"extra":1,"jsonrpc":"2.0","id":999999,"result":"0x' + b"ab" * 600_000 + b'"}'
HOSTILE = {
    "down": MockNodeOptions(error_rate=1.0, spare_probes=True, seed=1),  # HTTP 500: 502
    "slow": MockNodeOptions(latency_ms=3_000, spare_probes=True),  # past the deadline: 504
    # another call's id, small: read whole and refused (502, "bad node answer" logged)
    "liar": MockNodeOptions(
        raw_answer=b'{"jsonrpc":"2.0","id":999999,"result":"0x1"}', spare_probes=True
    ),
    # over the stream bound in a layout read whole: refused before the first byte
    "bigliar": MockNodeOptions(raw_answer=_ODD, spare_probes=True),
}
READ = b'{"jsonrpc":"2.0","id":5,"method":"eth_getBalance","params":["0x%s","latest"]}' % (
    b"00" * 20
)
_WAITS = re.compile(rb'("retry_after_ms":)\d+|(\r\nRetry-After: )\d+')


@pytest.fixture(scope="module")
def hostile_doors(redis_server: RedisProcess) -> Iterator[BothDoors]:
    extra: dict[str, dict[str, Any]] = {
        "limits": {"upstream_timeout_s": 0.5},
        "plans": {"payg": {"rate": 0.002, "burst": 1}},  # one call, then ~500 s to wait
    }
    with both_doors(redis_server.url, hostile=HOSTILE, extra=extra) as d:
        yield d


async def _payg_key(redis_url: str, prefix: str) -> str:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        store = Store(redis, prefix=prefix, hasher=PasswordHasher(time_cost=1, memory_cost=1024))
        email = f"p-{secrets.token_hex(3)}@example.com"
        acct = await store.create_account(email, "parity pw", "payg")
        return (await store.create_key(acct.id, name="payg"))[0]
    finally:
        await redis.aclose()


def _error(raw: bytes) -> tuple[int, Any]:
    (resp,), _ = split_responses(raw)
    return resp.status, json.loads(resp.body)["error"]


@pytest.mark.parametrize(
    ("network", "status", "message"),
    [
        ("down", 502, "Upstream unavailable"),
        ("slow", 504, "Upstream timeout"),
        ("liar", 502, "Upstream unavailable"),
        ("bigliar", 502, "Upstream unavailable"),
    ],
)
def test_node_failures_same_bytes_from_both_doors(
    hostile_doors: BothDoors, network: str, status: int, message: str
) -> None:
    raw = _same(hostile_doors, request(f"/{network}/{hostile_doors.key}", READ))
    assert _error(raw) == (status, {"code": -32603, "message": message})


def test_bad_node_answer_logged_by_either_door(
    hostile_doors: BothDoors, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.rpc")
    for network in ("liar", "bigliar"):
        _same(hostile_doors, request(f"/{network}/{hostile_doors.key}", READ))
    lines = [r.getMessage() for r in caplog.records if "bad node answer" in r.getMessage()]
    assert len(lines) == 4, lines  # two networks, two doors
    assert {line.split()[3] for line in lines} == {"network=liar", "network=bigliar"}
    assert not any(hostile_doors.key in line for line in lines)


def test_a_refusal_over_the_limit_same_bytes_from_both_doors(
    hostile_doors: BothDoors, redis_server: RedisProcess
) -> None:
    key = asyncio.run(_payg_key(redis_server.url, hostile_doors.prefix))
    path = f"/bsc/{key}"
    spent, _ = _exchange(hostile_doors.app_port, request(path, CALL), 1)
    assert split_responses(spent)[0][0].status == 200
    app, _ = _exchange(hostile_doors.app_port, request(path, CALL), 1)
    lean, _ = _exchange(hostile_doors.lean_port, request(path, CALL), 1)
    # the wait counts down between the two sends: its digits aside, the same bytes
    assert _WAITS.sub(rb"\1\2N", _masked(lean)) == _WAITS.sub(rb"\1\2N", _masked(app))
    status, error = _error(app)
    assert status == 429 and error["data"]["retry_after_ms"] > 400_000
    assert b"\r\nRetry-After: 5" in app and b"\r\nRateLimit-Policy: " in app


def test_refused_requests_same_bytes_and_status_from_both_doors(doors: BothDoors) -> None:
    path = f"/bsc/{doors.key}"
    big = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["' + b"x" * 1_100_000 + b'"]}'
    cases = [
        (request(path, big), 413),  # the declared length
        (request(path, chunked(big, [1000]), headers={"Transfer-Encoding": "chunked"}), 413),
        (request(path, CALL, headers={"Content-Type": "text/plain"}), 415),
        (request(path, CALL, method="PUT"), 405),
        (request("/bsc", CALL), 401),
    ]
    for data, status in cases:
        raw = _same(doors, data)
        code = -32001 if status == 401 else -32600
        assert _error(raw)[0] == status and _error(raw)[1]["code"] == code, raw[:300]
