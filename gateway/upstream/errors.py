"""The one upstream error type, and how a node's HTTP answer maps onto it.

``UpstreamError`` carries what the retry rules need (was the call sent,
was it a timeout, is it the node's fault); ``judge`` decides from a node's
HTTP status whether its answer is relayed or is an error, and whose fault.
Both transports (``upstream.transport``) and the pool share them.
"""

from __future__ import annotations

from typing import Final, TypeVar

# A node's 4xx answer that judges the request, not the node: relayed when JSON.
_RELAYED_4XX: Final = frozenset({400, 413, 422})

P = TypeVar("P")


class UpstreamError(Exception):
    """A call to a node, or to a network's nodes, failed: the one upstream error type.

    ``sent``: the node may have received the call (what the retry rules for
    non-idempotent calls need); ``timeout``: 504 rather than 502;
    ``too_large``: the answer ran past ``limits.max_response_bytes`` (no
    other node would do better); ``node_fault``: counts towards taking the
    node out; ``resend_ok``: the node refused it unread (HTTP 429).
    """

    def __init__(
        self,
        message: str,
        *,
        sent: bool = True,
        timeout: bool = False,
        too_large: bool = False,
        node_fault: bool = True,
        resend_ok: bool = False,
    ) -> None:
        super().__init__(message)
        self.sent = sent
        self.timeout = timeout
        self.too_large = too_large
        self.node_fault = node_fault
        self.resend_ok = resend_ok


def too_large(name: str) -> UpstreamError:
    """The answer ran past the size cap: not the node's fault, and no retry helps."""
    return UpstreamError(f"{name}: answer over the size limit", node_fault=False, too_large=True)


def judge(name: str, status: int, payload: P, is_json: bool) -> P:
    """The answer to relay, or ``UpstreamError`` saying whose fault it was.

    ``is_json``: the (buffered) body starts like JSON; only 2xx answers are
    ever streamed, so a non-2xx payload is always buffered.
    """
    if 200 <= status < 300:
        return payload
    if status in _RELAYED_4XX and is_json:
        return payload  # a JSON-RPC answer about the request itself
    if status == 429:
        raise UpstreamError(f"{name}: HTTP 429", resend_ok=True)
    raise UpstreamError(
        f"{name}: HTTP {status}",
        node_fault=status >= 500 or status in (401, 403, 404, 405, 408),
    )
