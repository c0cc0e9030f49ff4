"""ClientIP: every X-Forwarded-For line, joined in order, read from the right.

The request is aiohttp's own (``make_mocked_request``) with a peer address;
the real proxies are in tests/integration/test_proxies_xff.py.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from gateway.limits.limiter import ip_bits
from gateway.rpc.clientip import ClientIP


def request(peer: str, *forwarded: str) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    headers = CIMultiDict(("X-Forwarded-For", value) for value in forwarded)
    return make_mocked_request("POST", "/bsc", headers=headers, transport=transport)


LB = ClientIP(["10.0.0.0/8", "fd00::/8"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("10.0.0.1", ("203.0.113.7", "198.51.100.1"), "198.51.100.1"),  # HAProxy: own line
        ("10.0.0.1", ("203.0.113.7, 198.51.100.1",), "198.51.100.1"),  # nginx: appended
        ("10.0.0.1", ("203.0.113.7", "198.51.100.1, 10.0.0.9"), "198.51.100.1"),  # 2 proxies
        ("10.0.0.1", ("1.1.1.1, 10.2.2.2", "10.3.3.3"), "1.1.1.1"),  # trusted hops skipped
        ("10.0.0.1", ("10.2.2.2", "10.3.3.3"), "10.2.2.2"),  # all trusted: the leftmost
        ("10.0.0.1", (), "10.0.0.1"),  # nothing forwarded: the proxy itself
        ("10.0.0.1", ("1.1.1.1, , ",), "1.1.1.1"),  # empty hops skipped
        ("10.0.0.1", ("203.0.113.7", "192.0.2.1:8080"), "192.0.2.1"),  # a port dropped
        ("10.0.0.1", ("[2001:db8::1]:443",), "2001:db8::1"),
        ("fd00::1", ("2001:db8::5",), "2001:db8::5"),
        ("10.0.0.1", ("203.0.113.7", "unknown"), "unknown"),  # matches no allowlist
        ("192.0.2.9", ("203.0.113.7",), "192.0.2.9"),  # untrusted peer: header ignored
    ],
)
def test_client_ip_behind_trusted_proxies(
    peer: str, forwarded: tuple[str, ...], client: str
) -> None:
    assert LB(request(peer, *forwarded)) == client


def test_no_trusted_proxies_means_the_peer() -> None:
    assert ClientIP([])(request("10.0.0.1", "203.0.113.7")) == "10.0.0.1"


def test_a_garbage_hop_matches_no_allowlist() -> None:
    assert ip_bits(LB(request("10.0.0.1", "203.0.113.7", "unknown"))) == ""


def test_a_long_chain_of_trusted_hops_ends_at_its_leftmost() -> None:
    chain = ", ".join(["10.1.1.1"] * 2000)
    assert LB(request("10.0.0.1", chain, "10.0.0.2")) == "10.1.1.1"
