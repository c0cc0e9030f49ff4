"""The network a client address is cut to before it is stored or shown."""

from __future__ import annotations

import ipaddress


def mask_ip(address: str) -> str:
    """The client's network, not the client: IPv4 to /24, IPv6 to /48 ("" if no address).

    What the dashboard shows and stores about where a session or a failed
    call came from (security_store, insight): enough to recognise a network.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return ""
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    bits = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))
