"""The client's IP: the peer, or X-Forwarded-For when the peer is a trusted proxy.

Behind a load balancer every peer is the balancer, so IP allowlists and
per-IP login throttling would see one address for everyone. Only hops that
``server.trusted_proxies`` names are skipped, from the right, so a client
cannot forge its address by sending its own X-Forwarded-For.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from aiohttp import hdrs, web


class ClientIP:
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
            if len(self._cache) < 4096:
                self._cache[address] = known
        return known

    def __call__(self, request: web.BaseRequest) -> str:
        remote = request.remote or ""
        if not self._nets or not self._trusted(remote):
            return remote
        forwarded = request.headers.get(hdrs.X_FORWARDED_FOR)
        if not forwarded:
            return remote
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._trusted(hop):
                return hop
        return hops[0] if hops else remote
