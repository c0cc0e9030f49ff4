"""The client's IP: the peer, or X-Forwarded-For when the peer is a trusted proxy.

Behind a load balancer every peer is the balancer, so IP allowlists and
per-IP login throttling would see one address for everyone. Proxies append
to what the client sent: HAProxy's ``option forwardfor`` adds its own
``X-Forwarded-For`` header line after the client's, nginx's
``$proxy_add_x_forwarded_for`` appends to the (joined) client value. So the
only hops worth anything are at the right: every header is read, joined in
order, and walked from the right while a hop is one of
``server.trusted_proxies``; the first untrusted hop is the client. Whatever
the client wrote sits to the left of that and is never read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Protocol

from aiohttp import hdrs, web
from multidict import CIMultiDictProxy

_CACHE_MAX = 4096  # distinct addresses remembered as trusted / untrusted


class Peer(Protocol):
    """What is read of a request: ``web.BaseRequest``, or the lean door's call."""

    @property
    def remote(self) -> str | None: ...
    @property
    def headers(self) -> CIMultiDictProxy[str]: ...


class ClientIP:
    """``client_ip(request) -> str``; one per app, built from the trusted CIDRs."""

    def __init__(self, trusted: Sequence[str]) -> None:
        self._nets = tuple(ipaddress.ip_network(c, strict=False) for c in trusted)
        self._cache: dict[str, bool] = {}

    def _trusted(self, address: str) -> bool:
        known = self._cache.get(address)
        if known is None:
            try:
                ip = ipaddress.ip_address(address)
                known = any(ip in net for net in self._nets)
            except ValueError:
                known = False
            if len(self._cache) < _CACHE_MAX:
                self._cache[address] = known
        return known

    def __call__(self, request: Peer) -> str:
        remote = request.remote or ""
        if not self._nets or not self._trusted(remote):
            return remote
        # Every header line, in order: HAProxy's is a line of its own after
        # the client's, and the first line alone is the client's forgery.
        values = request.headers.getall(hdrs.X_FORWARDED_FOR, ())
        leftmost = remote
        for value in reversed(values):
            for hop in reversed(value.split(",")):
                hop = hop.strip()
                if not hop:
                    continue
                address = _address(hop)
                if not self._trusted(address):
                    return address
                leftmost = address
        # Every hop was a trusted proxy: the client is inside that network.
        return leftmost


# The app's one ClientIP (typedefs re-exports the key): defined here so the dashboard
# and the RPC handler read the client's address from this module, not from each other.
CLIENT_IP = web.AppKey("client_ip", ClientIP)


def client_ip(request: web.Request) -> str:
    """The client's address as the app's trusted-proxy rules see it."""
    return request.config_dict[CLIENT_IP](request)


def _address(hop: str) -> str:
    """A hop without the port some proxies add: ``[2001:db8::1]:443``, ``192.0.2.1:80``.

    Anything else comes back as written; if it is not an address it matches
    no IP allowlist, which is the safe side.
    """
    if hop.startswith("["):
        end = hop.find("]")
        return hop[1:end] if end > 0 else hop
    if hop.count(":") == 1:
        return hop.partition(":")[0]
    return hop
