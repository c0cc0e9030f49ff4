"""Listen addresses as the config writes them (``server.metrics_listen``, ``--metrics-listen``)."""

from __future__ import annotations


def listen_address(text: str) -> tuple[str, int] | None:
    """``"127.0.0.1:9464"`` / ``"[::1]:9464"`` -> (host, port); None when malformed."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host, int(port)
