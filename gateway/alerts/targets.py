"""Where a webhook may point: an https URL whose host resolves only to public addresses.

A target is checked twice: when the URL is added (``check_url``, so the owner
hears at once) and at every delivery, where the connector's resolver
(``PublicResolver``) refuses a name that now resolves to a loopback, private,
link-local or otherwise non-public address. The connection is made to exactly
the addresses that resolver returned, so a name cannot pass the check and then
be answered differently for the connection itself (DNS rebinding). An IP
literal in the URL never reaches a resolver; ``check_host`` judges it before
each attempt. Redirects are never followed (a 3xx is a failed attempt), so no
answer can send a delivery elsewhere.

``alerts.allow_private_targets = true`` lifts both checks and allows plain
http (tests, the demo, a receiver on the operator's own network).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

MAX_URL_LENGTH = 2048


class TargetRefused(Exception):
    """The URL or the address it resolves to may not receive deliveries; says why."""


def is_public(address: str) -> bool:
    """True for an address on the public internet (IPv4-mapped IPv6 judged as IPv4)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


def parse_url(url: str, allow_private: bool) -> tuple[str, str]:
    """(scheme, host) of a webhook URL, or ``TargetRefused`` saying what is wrong."""
    url = url.strip()
    if not url or len(url) > MAX_URL_LENGTH or not url.isascii() or not url.isprintable():
        raise TargetRefused("the webhook URL must be a printable URL of at most 2048 characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise TargetRefused("the webhook URL is not a valid URL") from None
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        raise TargetRefused("the webhook URL must start with https://")
    if not parts.hostname:
        raise TargetRefused("the webhook URL has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the webhook URL must not carry a user name or password")
    if parts.fragment:
        raise TargetRefused("the webhook URL must not have a #fragment")
    return parts.scheme, parts.hostname


def check_host(host: str, allow_private: bool) -> None:
    """Refuse an IP literal that is not public (a name is the resolver's to judge)."""
    if allow_private:
        return
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if host.lower() == "localhost" or host.lower().endswith(".localhost"):
            raise TargetRefused("the webhook URL points at a loopback address") from None
        return
    if not is_public(host):
        raise TargetRefused(f"the webhook URL points at a non-public address ({host})")


async def check_url(url: str, allow_private: bool, resolver: AbstractResolver | None = None) -> str:
    """The URL, stripped, once its scheme, form and resolved addresses pass."""
    _, host = parse_url(url, allow_private)
    check_host(host, allow_private)
    if not allow_private:
        own = resolver is None
        resolver = resolver or DefaultResolver()
        try:
            await PublicResolver(resolver).resolve(host, 443, socket.AF_UNSPEC)
        finally:
            if own:
                await resolver.close()
    return url.strip()


class PublicResolver(AbstractResolver):
    """A resolver that answers only if every address of the name is public.

    One non-public address refuses the whole name: a name that mixes them is
    a rebinding attempt or a mistake, and either way no delivery goes there.
    """

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            found = await self._inner.resolve(host, port, family)
        except OSError as exc:
            raise TargetRefused(f"the webhook host {host} does not resolve: {exc}") from None
        if not found:
            raise TargetRefused(f"the webhook host {host} does not resolve")
        for entry in found:
            if not is_public(entry["host"]):
                raise TargetRefused(
                    f"the webhook host {host} resolves to a non-public address ({entry['host']})"
                )
        return found

    async def close(self) -> None:
        await self._inner.close()
