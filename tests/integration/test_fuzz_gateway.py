"""The fuzzer: generated HTTP and WebSocket input against a running gateway.

One ``gateway serve --workers 2`` (real Redis, mock nodes as processes) per
module; hypothesis generates bodies, headers, encodings, framing, pipelined
writes and WebSocket frames, sent over raw sockets (the HTTP input is
tests/helpers/fuzzinput.py, which the door-parity test sends too). The
oracles, checked on every example:

- no 500, and no 5xx but 502 / 503 / 504;
- a JSON-RPC body on every answer from an RPC path (204 and the CORS
  preflight excepted);
- ids: the answer carries the id each call sent; byte for byte where the
  gateway already keeps bytes (``exact_id``), by value otherwise;
- no traceback in the log, and at most one log line per request sent;
- the same worker processes at the end (a crash shows as a new pid);
- no request answered later than ``MAX_ANSWER_S``.

Budget: in the suite each test runs a fixed, derandomized number of
examples (about two minutes in all on a busy 2-core machine). ``scripts/fuzz
--minutes N`` runs rounds with random seeds until the time is spent
(``FUZZ_EXAMPLES`` per test per round, ``FUZZ_RANDOM=1``). A finding becomes
a plain test in test_fuzz_findings.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.redis.embedded import RedisProcess
from tests.helpers import rawws
from tests.helpers.fuzzinput import (
    GARBAGE,
    FuzzRequest,
    bodies,
    budget,
    calls,
    dumps,
    http_requests,
    valid_calls,
)
from tests.helpers.fuzzstack import FuzzStack, fuzz_stack
from tests.helpers.rawhttp import RawResponse, exchange, request

pytestmark = pytest.mark.slow

MAX_ANSWER_S = 10.0
ALLOWED_5XX = {502, 503, 504}

# Ids the gateway writes back as the client's bytes: the one pipeline keeps
# every id as sent, so the oracle checks every id byte for byte.
IDS_BYTE_EXACT_FOR_ALL = True


def exact_id(value: Any) -> bool:
    """Whether the answer must carry ``json.dumps(value)`` itself."""
    if IDS_BYTE_EXACT_FOR_ALL:
        return True
    if type(value) is int:
        return True
    return (
        type(value) is str
        and value.isascii()
        and all(c.isprintable() and c not in '"\\' for c in value)
    )


@pytest.fixture(scope="module")
def gw(redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzStack]:
    with fuzz_stack(tmp_path_factory.mktemp("fuzz"), redis_server.url) as stack:
        yield stack
        # the module's last word: every worker that started is still the one serving
        assert stack.worker_pids() == stack.workers, "a worker was restarted"
        assert "Traceback" not in stack.new_log()


# -- the oracles -------------------------------------------------------------------
def _is_answer(obj: Any) -> bool:
    return (
        type(obj) is dict
        and obj.get("jsonrpc") == "2.0"
        and "id" in obj
        and (("result" in obj) != ("error" in obj))
        and ("error" not in obj or type(obj["error"].get("code")) is int)
    )


def check_response(resp: RawResponse, method: str = "POST") -> Any:
    """Status and body oracles; returns the parsed body (None for an empty one)."""
    assert resp.status < 500 or resp.status in ALLOWED_5XX, (resp.status, resp.body[:300])
    if resp.status == 204 or (method == "OPTIONS" and resp.status < 300):
        assert resp.body == b""
        return None
    assert resp.headers.get("content-type", "").startswith("application/json"), resp
    answer = json.loads(resp.body)
    if type(answer) is list:
        assert answer and all(_is_answer(a) for a in answer), answer
    else:
        assert _is_answer(answer), answer
    return answer


def check_ids(sent: Any, answer: Any, raw: bytes) -> None:
    """Each call's id comes back: by value always, by bytes where ``exact_id``."""
    if type(sent) is dict and type(answer) is dict:
        if "id" in sent and type(sent["id"]) in (int, str) and answer.get("id") is not None:
            assert answer["id"] == sent["id"], (sent, answer)
            if exact_id(sent["id"]):
                assert b'"id":' + json.dumps(sent["id"]).encode() in raw, (sent, raw)
    elif type(sent) is list and type(answer) is list:
        sent_ids = [c["id"] for c in sent if type(c) is dict and type(c.get("id")) in (int, str)]
        for item in answer:
            if item["id"] is not None and type(item["id"]) in (int, str):
                assert item["id"] in sent_ids, (item, sent_ids)


def check_log(gw: FuzzStack, requests: int) -> None:
    """No traceback; at most one line per request, counted since start-up.

    The log is written by other processes, so a request's line may land
    after its answer: the bound is on the running totals, not per example.
    """
    text = gw.new_log()
    assert "Traceback" not in text, text[-3000:]
    gw.requests += requests
    gw.lines += sum(1 for line in text.splitlines() if line.strip())
    assert gw.lines <= gw.requests, text[-3000:]


# -- HTTP: one request per connection ----------------------------------------------
@budget(1200)
@given(req=http_requests(max_cut=400))
def test_http_requests(gw: FuzzStack, req: FuzzRequest) -> None:
    started = time.monotonic()
    responses, closed = exchange(gw.port, req.wire(gw.key), timeout_s=MAX_ANSWER_S + 1)
    assert time.monotonic() - started < MAX_ANSWER_S
    assert responses, f"no answer (closed={closed})"
    answer = check_response(responses[0], req.method)
    if req.content_encoding in (None, "identity") and answer is not None:
        try:
            sent = json.loads(req.body)
        except ValueError:
            sent = None
        check_ids(sent, answer, responses[0].body)
    check_log(gw, 1)


# -- HTTP: pipelined requests in one write, maybe ending in garbage -----------------
@budget(500)
@given(
    batch=st.lists(valid_calls, min_size=1, max_size=6),
    garbage=GARBAGE,
    path=st.sampled_from(["/bsc/{k}", "/opbnb/{k}"]),
)
def test_pipelined_requests(
    gw: FuzzStack, batch: list[dict[str, Any]], garbage: bytes, path: str
) -> None:
    data = b"".join(request(path.format(k=gw.key), dumps(c)) for c in batch) + garbage
    want = len(batch) + (1 if garbage else 0)
    started = time.monotonic()
    responses, _ = exchange(gw.port, data, want=want, timeout_s=MAX_ANSWER_S + 1)
    assert time.monotonic() - started < MAX_ANSWER_S
    assert len(responses) == want, [r.status for r in responses]
    for call, resp in zip(batch, responses, strict=False):
        answer = check_response(resp)
        check_ids(call, answer, resp.body)
    if garbage:
        assert responses[-1].status == 400
        check_response(responses[-1])
    check_log(gw, want)


# -- WebSocket frames ----------------------------------------------------------------
frames = st.one_of(
    valid_calls.map(lambda c: ("text", dumps(c))),
    calls.map(lambda c: ("text", dumps(c))),
    bodies.map(lambda b: ("binary", b)),
    st.binary(max_size=130).map(lambda b: ("ping", b)),
    st.binary(max_size=20).map(lambda b: ("pong", b)),
    st.tuples(st.sampled_from([3, 4, 5, 0xB, 0xF]), st.binary(max_size=10)).map(
        lambda t: (f"op{t[0]}", t[1])
    ),
    st.binary(max_size=20).map(lambda b: ("cont", b)),
    st.binary(max_size=20).map(lambda b: ("rsv", b)),
    st.binary(max_size=20).map(lambda b: ("fragment", b)),
    st.binary(max_size=20).map(lambda b: ("unmasked", b)),
    st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80"]).map(lambda b: ("text", b)),  # not UTF-8
)
PROTOCOL_CLOSE = {1002, 1003, 1007, 1008, 1009}


def _frame_bytes(kind: str, payload: bytes) -> bytes:
    if kind == "text":
        return rawws.encode(rawws.TEXT, payload)
    if kind == "binary":
        return rawws.encode(rawws.BINARY, payload)
    if kind == "ping":
        return rawws.encode(rawws.PING, payload)
    if kind == "pong":
        return rawws.encode(rawws.PONG, payload)
    if kind == "cont":
        return rawws.encode(rawws.CONT, payload)
    if kind == "rsv":
        return rawws.encode(rawws.TEXT, payload, rsv=2)
    if kind == "fragment":  # a text frame that never finishes
        return rawws.encode(rawws.TEXT, payload, fin=False)
    if kind == "unmasked":
        return rawws.encode(rawws.TEXT, payload, masked=False)
    return rawws.encode(int(kind[2:]), payload)


def _violates(kind: str, payload: bytes) -> bool:
    """Whether RFC 6455 lets the server fail the connection for this frame."""
    if kind in ("text", "binary", "pong"):
        return False
    if kind == "ping":
        return len(payload) > 125
    return True


@budget(500)
@given(
    sent=st.lists(frames, min_size=1, max_size=5), path=st.sampled_from(["/bsc/{k}", "/opbnb/{k}"])
)
def test_websocket_frames(gw: FuzzStack, sent: list[tuple[str, bytes]], path: str) -> None:
    """Then one valid call: answered with its id, unless a protocol error closed the socket.

    A frame the protocol forbids may close the socket (with a close frame, or,
    if our later writes raced the close, a reset); anything else may not.
    """
    started = time.monotonic()
    violated = any(_violates(k, p) for k, p in sent)
    ws = rawws.RawWs(gw.port, path.format(k=gw.key), timeout_s=MAX_ANSWER_S)
    probe_id = 987654321
    probe = {"jsonrpc": "2.0", "id": probe_id, "method": "eth_chainId", "params": []}
    try:
        assert ws.status == 101, ws.status
        try:
            for kind, payload in sent:
                ws.send(_frame_bytes(kind, payload))
            ws.send(rawws.encode(rawws.TEXT, dumps(probe)))
        except (BrokenPipeError, ConnectionResetError):
            assert violated, "the server closed on frames the protocol allows"
        while True:
            frame = ws.read()
            assert time.monotonic() - started < MAX_ANSWER_S
            if frame is None:
                assert violated, "closed without a close frame"
                break
            if frame.opcode == rawws.CLOSE:
                code = int.from_bytes(frame.payload[:2], "big") if len(frame.payload) >= 2 else 0
                assert violated and code in PROTOCOL_CLOSE, (code, sent)
                break
            if frame.opcode in (rawws.TEXT, rawws.BINARY):
                msg = json.loads(frame.payload)
                items = msg if type(msg) is list else [msg]
                assert all(_is_answer(i) for i in items), msg
                if type(msg) is dict and msg.get("id") == probe_id:
                    assert b'"id":987654321' in frame.payload
                    assert msg["result"] == ("0x38" if path.startswith("/bsc") else "0xcc")
                    break
    finally:
        ws.close()
    check_log(gw, len(sent) + 1)
