"""What the load generator sends: request templates for keys, methods and batches.

Requests are serialised once, up front; the generator only writes bytes.
Templates are laid out so that request *i* uses key ``i % len(keys)``: keys
are evenly interleaved in arrival order, which is what per-key rate checks
assume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from bench.client import build_request

DEFAULT_METHODS = ("eth_blockNumber", "eth_getBalance", "eth_call", "eth_chainId")
_ADDRESS = "0x" + "ab" * 20
_PARAMS: dict[str, list[Any]] = {
    "eth_getBalance": [_ADDRESS, "latest"],
    "eth_getTransactionCount": [_ADDRESS, "latest"],
    "eth_call": [{"to": _ADDRESS, "data": "0x70a08231" + "00" * 12 + "ab" * 20}, "latest"],
    "eth_estimateGas": [{"to": _ADDRESS, "value": "0x1"}],
    "eth_getBlockByNumber": ["latest", False],
    "eth_getLogs": [{"fromBlock": "latest", "toBlock": "latest"}],
}


@dataclass(frozen=True)
class Endpoint:
    """Where to send: host, port and the network path prefix (e.g. /bsc)."""

    host: str
    port: int
    prefix: str

    @classmethod
    def from_url(cls, url: str, prefix: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url}: only plain http:// targets are supported")
        base = parts.path.rstrip("/")
        return cls(parts.hostname, parts.port or 80, base + prefix)


def rpc_body(methods: tuple[str, ...], batch: int, first_id: int = 1) -> bytes:
    """One JSON-RPC request object, or a batch of ``batch`` calls cycling ``methods``."""
    calls = [
        {
            "jsonrpc": "2.0",
            "id": first_id + i,
            "method": methods[i % len(methods)],
            "params": _PARAMS.get(methods[i % len(methods)], []),
        }
        for i in range(max(batch, 1))
    ]
    return orjson.dumps(calls if batch > 1 else calls[0])


def make_requests(
    endpoint: Endpoint,
    keys: list[str],
    *,
    key_in: str = "path",
    methods: tuple[str, ...] = DEFAULT_METHODS,
    batch: int = 1,
) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """(request templates, key index of each template).

    With a batch, each template is one batch; with single calls there is one
    template per method.  ``keys`` may be empty (unkeyed baselines).
    """
    if key_in not in ("path", "header"):
        raise ValueError("key_in must be 'path' or 'header'")
    if batch > 1:
        bodies = [rpc_body(methods, batch)]
    else:
        bodies = [rpc_body((m,), 1, first_id=i + 1) for i, m in enumerate(methods)]
    key_list: list[str | None] = list(keys) or [None]
    requests: list[bytes] = []
    key_of: list[int] = []
    for body in bodies:
        for k, key in enumerate(key_list):
            path, bearer = endpoint.prefix or "/", None
            if key is not None and key_in == "path":
                path = f"{endpoint.prefix}/{key}"
            elif key is not None:
                bearer = key
            requests.append(build_request(endpoint.host, endpoint.port, path, body, bearer=bearer))
            key_of.append(k)
    return tuple(requests), tuple(key_of)
