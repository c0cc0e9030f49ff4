"""Whether a network's subscriptions have a WebSocket node, as /readyz shows it.

A network can serve HTTP with every node while no node takes a WebSocket
(HTTP-only provider URLs, a ``ws_upstreams`` list that points nowhere); then
every ``eth_subscribe`` fails. /readyz reports that as degraded ("no
WebSocket upstream"), not as not-ready: plain calls still work, and a pod
that serves them should stay in its Service.

What counts, in order: no WebSocket URL configured; the subscription feed's
socket is open (``ok``); a node's own ``newHeads`` socket is live (``ok``);
every URL refused the feed's last round, or every node's ``newHeads``
follower found no socket (``no WebSocket upstream``); else ``untried`` (no
client has subscribed yet and the gateway follows heads by polling).
"""

from __future__ import annotations

from typing import Final

from gateway.upstream.pool import NodePool
from gateway.ws.feed import Feed

OK: Final = "ok"
NONE: Final = "no WebSocket upstream"
UNTRIED: Final = "untried"


def ws_state(feed: Feed | None, pool: NodePool | None, urls: tuple[str, ...]) -> str:
    """``ok``, ``no WebSocket upstream`` or ``untried`` for one network."""
    if not urls:
        return NONE
    if feed is not None and feed.link is not None:
        return OK
    if pool is not None and any(node.newheads for node in pool.nodes):
        return OK
    if feed is not None and feed.no_socket:
        return NONE
    followers = pool.feeds.followers if pool is not None else []
    if followers and all(f.no_ws for f in followers):
        return NONE
    return UNTRIED
