"""A refused body costs nothing, on both doors: the answer says ``Connection: close``,
the connection closes, and what the client still sends is never read or inflated."""

from __future__ import annotations

import time

import pytest

from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401
from tests.helpers.rawhttp import RawResponse, aexchange, gzip_bomb, request
from tests.helpers.served import served

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb()


def _only(responses: list[RawResponse]) -> RawResponse:
    assert len(responses) == 1, responses
    return responses[0]


async def test_a_gzip_bomb_is_refused_without_inflating_it(
    make_config: MakeConfig, api_key: str, bomb: bytes
) -> None:
    async with served(make_config()) as s:
        headers = {"Content-Encoding": "gzip"}
        started = time.process_time()
        responses, closed = await aexchange(
            s.port, request(f"/bsc/{api_key}", bomb, headers=headers), want=2, timeout_s=20
        )
        spent = time.process_time() - started
        print(f"gzip bomb (1 GiB inflated) refused: {spent * 1000:.1f} ms of CPU")
        answer = _only(responses)
        assert answer.status == 413, answer
        assert answer.headers.get("connection") == "close"
        assert closed, "the connection stayed open after the refusal"
        # inflating the whole GiB took 1.5 s of the worker's CPU; a bounded
        # refusal stops after the first slices (generous for a loaded box)
        assert spent < 0.8, spent
        # the gateway still answers, on a new connection
        responses, _ = await aexchange(s.port, request(f"/bsc/{api_key}", CALL))
        assert _only(responses).status == 200


async def test_expect_100_continue_is_refused_before_the_body_is_sent(
    make_config: MakeConfig, api_key: str
) -> None:
    async with served(make_config()) as s:
        head = request(
            f"/bsc/{api_key}",
            b"",
            headers={"Content-Length": str(50 * 2**20), "Expect": "100-continue"},
        )
        responses, closed = await aexchange(s.port, head, want=2, timeout_s=10)
        answer = _only(responses)  # no "100 Continue" before it
        assert answer.status == 413, answer
        assert answer.headers.get("connection") == "close"
        assert closed


async def test_a_chunked_body_over_the_limit_closes_and_the_next_call_is_answered(
    make_config: MakeConfig, api_key: str
) -> None:
    async with served(make_config()) as s:
        big = b"[" + b" " * (2 * 2**20) + b"]"
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big)
        req = request(f"/bsc/{api_key}", chunked, headers={"Transfer-Encoding": "chunked"})
        responses, closed = await aexchange(s.port, req, want=2, timeout_s=10)
        answer = _only(responses)
        assert answer.status == 413, answer
        assert answer.headers.get("connection") == "close"
        assert closed
        started = time.monotonic()
        responses, _ = await aexchange(s.port, request(f"/bsc/{api_key}", CALL), timeout_s=5)
        assert _only(responses).status == 200
        assert time.monotonic() - started < 2.0
