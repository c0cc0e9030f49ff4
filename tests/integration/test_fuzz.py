"""Arbitrary bytes never make the handler raise, and never reach a node unkeyed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.demo.mocknode import MockNode
from tests.helpers.config import Client
from tests.helpers.probes import forwarded


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


FLOATS = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | FLOATS | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["jsonrpc", "id", "method", "params", "x"]), children, max_size=5
        )
    ),
    max_leaves=20,
)
calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "method": st.sampled_from(["eth_chainId", "eth_call", "debug_x", ""]) | st.integers(),
    },
    optional={
        "id": st.integers() | st.text(max_size=5) | st.none() | FLOATS,
        "params": json_values,
    },
)
bodies = (
    st.binary(max_size=300)
    | json_values.map(_dumps)
    | calls.map(_dumps)
    | st.lists(calls | json_values, max_size=6).map(_dumps)
)

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@FUZZ
@given(body=bodies)
async def test_any_body_gets_a_json_rpc_answer(client: Client, api_key: str, body: bytes) -> None:
    resp = await client.post(
        f"/bsc/{api_key}", data=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status in (200, 204, 429), resp.status
    text = await resp.read()
    if resp.status == 204:
        assert text == b""
        return
    answer = json.loads(text)
    if isinstance(answer, dict) and "error" in answer:
        assert answer["jsonrpc"] == "2.0" and isinstance(answer["error"]["code"], int)
        assert "Traceback" not in text.decode()


@pytest.mark.slow
@FUZZ
@given(body=bodies, path=st.sampled_from(["/bsc", "/bsc/" + "k" * 32, "/opbnb/x"]))
async def test_unkeyed_bodies_never_reach_a_node(
    client: Client, mock_nodes: dict[str, MockNode], body: bytes, path: str
) -> None:
    resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 401
    assert sum(forwarded(n) for n in mock_nodes.values()) == 0
