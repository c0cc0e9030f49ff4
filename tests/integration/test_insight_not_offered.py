"""The key's Requests page names a method that is not offered as the client sent it
(as text, cut at 64 characters), and the "Method" filter finds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from gateway.config import Config
from gateway.store.insight import NOT_OFFERED, InsightSink, shown_method
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import User, new_email, wait_for_request_log

AiohttpClient = Callable[..., Any]
LONG = "eth_" + "getSomethingVeryLongThatNoNodeOffers" * 3  # 112 characters


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    return make_config({"insight": {"interval_s": 0.05}})


async def test_a_method_not_offered_is_logged_as_sent_and_found_by_the_filter(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    key, key_id = await user.create_key()
    for method in (LONG, "debug_traceTransaction"):
        resp = await client.post(
            f"/bsc/{key}", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": []}
        )
        assert (await resp.json())["error"]["code"] == -32601
    # a WebSocket call goes through the same pipeline and is logged the same way
    async with client.ws_connect(f"/bsc/{key}") as ws:
        await ws.send_json({"jsonrpc": "2.0", "id": 2, "method": "eth_overTheSocket"})
        assert (await ws.receive_json(timeout=5))["error"]["code"] == -32601
    path = f"/dashboard/keys/{key_id}/requests"
    doc = await wait_for_request_log(user, path, 3)
    rows = doc.find(data_testid="request-log").find_all(data_testid="request-log-row")
    assert {r.attrs["data-method"] for r in rows} == {
        LONG[:64],
        "debug_traceTransaction",
        "eth_overTheSocket",
    }
    cells = [td.text.strip() for row in rows for td in row.tags("td")]
    assert LONG[:64] in cells and "(not a valid call)" not in cells
    # the per-method sums count them under one name (what a client sends is unbounded)
    hour = doc.find(data_testid="method-insight", data_window="hour")
    assert hour.find(data_method=NOT_OFFERED).testid("calls") == "3"
    # the Method filter (64 characters at most) finds the call by what was sent
    found = await user.get(f"{path}?method={quote(LONG)}")
    got = found.find(data_testid="request-log").find_all(data_testid="request-log-row")
    assert [r.attrs["data-method"] for r in got] == [LONG[:64]]


def test_shown_method_cuts_and_keeps_only_printable_text() -> None:
    assert shown_method("eth_call") == "eth_call"
    assert shown_method("x" * 100) == "x" * 64
    assert shown_method("eth_\x00call\n") == "eth_\ufffdcall\ufffd"


async def test_the_sink_logs_the_sent_name_and_sums_one_row(redis: Any, prefix: str) -> None:
    sink = InsightSink(redis, prefix)
    sink.record("h" * 64, "-", -32601, 200, 1.0, "127.0.0.1", not_offered="eth_foo")
    sink.record("h" * 64, "-", -32601, 200, 1.0, "127.0.0.1", not_offered="eth_bar")
    assert set(sink._sums["h" * 64]) == {NOT_OFFERED}
    assert [e[1] for e in sink._logs["h" * 64]] == ["eth_foo", "eth_bar"]
