"""A key's allowlists (origins, client IPs, methods) and their matching rules.

Parsed once per key record read, then checked for every request the
process admits locally (see ``gateway.limits.leasing``); the stored forms come
from ``accounts.normalize_origin`` and ``limiter.cidr_bits``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Allowlists:
    """A key's allowlists, parsed once per record read; the matching rules below.

    Stored entries come from ``accounts.normalize_origin`` / ``cidr_bits``
    (lowercased origins ``scheme://host[:port]``, bare ``host[:port]`` for any
    scheme, ``[scheme://]*.suffix`` wildcards at a dot boundary; IP prefixes
    behind a family mark). Entries of one list are ORed, lists ANDed, and a
    lone ``*`` matches everything, an absent Origin or IP included.
    """

    origins: frozenset[str] = frozenset()
    wildcards: tuple[tuple[str, str], ...] = ()  # (scheme head or "", ".suffix")
    ips: tuple[str, ...] = ()
    methods: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, org: tuple[str, ...], ipb: tuple[str, ...], mth: tuple[str, ...]) -> Allowlists:
        if "*" in org:
            org = ()
        if "*" in ipb:
            ipb = ()
        if "*" in mth:
            mth = ()
        wild = []
        for entry in org:
            star = entry.find("*")
            if star >= 0:
                wild.append((entry[:star], entry[star + 1 :]))
        return cls(frozenset(org), tuple(wild), ipb, frozenset(mth))

    @property
    def empty(self) -> bool:
        return not (self.origins or self.ips or self.methods)

    def allows(self, methods: Iterable[str], origin: str, ip_bits: str) -> bool:
        if self.origins and not self._origin(origin.lower()):
            return False
        if self.ips and not self._ip(ip_bits):
            return False
        return not self.methods or all(m in self.methods for m in methods)

    def refusal(self, methods: Iterable[str], origin: str, ip_bits: str) -> str:
        """Which list refuses the request (as ``admit.lua`` names it): "origin", "ip",
        "method:<name>", or "" when every list allows it."""
        if self.origins and not self._origin(origin.lower()):
            return "origin"
        if self.ips and not self._ip(ip_bits):
            return "ip"
        for method in methods if self.methods else ():
            if method not in self.methods:
                return "method:" + method
        return ""

    def _origin(self, origin: str) -> bool:
        if not origin:
            return False
        if origin in self.origins:
            return True
        scheme, sep, host = origin.partition("://")
        if not sep or not scheme or not host or "/" in host or "/" in scheme:
            return False
        if host in self.origins:
            return True
        return any(
            suffix[:1] == "."
            and len(host) > len(suffix)
            and host.endswith(suffix)
            and (head == "" or head == scheme + "://")
            for head, suffix in self.wildcards
        )

    def _ip(self, bits: str) -> bool:
        if not bits:
            return False
        for entry in self.ips:
            if entry[:1] in ("4", "6"):
                if bits.startswith(entry):
                    return True
            elif bits.startswith(entry, 1):  # stored before the family mark existed
                return True
        return False


NO_ALLOWLISTS = Allowlists()
