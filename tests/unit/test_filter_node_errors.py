"""A node's refusal of an eth_getLogs that matched too much is marked so a poll splits it."""

from __future__ import annotations

import orjson
import pytest

from gateway.filters.nodepath import _node_error


@pytest.mark.parametrize(
    ("message", "too_large"),
    [
        ("query returned more than 10000 results", True),
        ("Log response size exceeded. You can make eth_getLogs requests with up to", True),
        ("header not found", False),
        ("invalid argument 0: hex string without 0x prefix", False),
    ],
)
def test_a_node_saying_too_many_results_is_too_large(message: str, too_large: bool) -> None:
    reply = orjson.dumps({"jsonrpc": "2.0", "id": 0, "error": {"code": -32005, "message": message}})
    error = _node_error(reply)
    assert error.too_large is too_large
    assert (error.kind.code, error.kind.message) == (-32005, message)  # its own words
