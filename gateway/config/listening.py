"""The config sections of clients that keep listening: WebSocket sockets and their
subscriptions (``[ws]``) and the filters the gateway keeps for polling
clients (``[filters]``).

Same rules as schema.py (frozen dataclasses, the field defaults are the shipped
defaults, load.py type-checks TOML against the annotations); reached as
``gateway.config.WsConfig`` / ``gateway.config.FiltersConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WsConfig:
    """WebSocket endpoint: limits, heartbeats, upstream subscriptions."""

    enabled: bool = True
    max_message_bytes: int = 1_048_576  # a bigger frame closes the socket (1009)
    # Ping an idle socket this often; no pong in time closes it. The pings are
    # also what keeps a quiet socket open through a proxy's idle timeout, so
    # keep it well under those (nginx proxy_read_timeout 75 s, a cloud load
    # balancer's 60 s).
    heartbeat_s: float = 20.0
    max_sockets_per_key: int = 100  # across all processes; a plan's ws_max_sockets overrides
    # Each open socket holds a lease in Redis, renewed every third of this; a
    # crashed process's leases lapse after it (gateway/ws/leases.py).
    socket_lease_s: float = 60.0
    max_subscriptions_per_socket: int = 100  # a plan's ws_max_subscriptions overrides
    # Distinct upstream subscriptions (kind + filter) one key may hold open in
    # this process, over all its sockets, and one network may hold at a node.
    max_upstream_subscriptions_per_key: int = 200
    max_upstream_subscriptions_per_network: int = 5_000
    max_in_flight_per_socket: int = 32  # calls worked on at once; further frames wait unread
    # A client that stops reading is dropped once this many bytes wait for it
    # (on top of the kernel's and the transport's own buffers).
    send_queue_bytes: int = 1_048_576
    # Notifications are charged to the key's bucket in one Redis call per key
    # per interval (not one per notification per socket).
    charge_interval_s: float = 1.0
    # Safety net under pub/sub: keys with open sockets are re-read this often
    # (one pipelined round trip), so a lost revocation message still closes them.
    recheck_interval_s: float = 30.0
    gap_fill_max_blocks: int = 128  # on failover, missed newHeads fetched by number, at most
    reorg_memory_blocks: int = 64  # blocks of delivered logs kept to detect re-orgs
    upstream_connect_timeout_s: float = 5.0
    upstream_request_timeout_s: float = 10.0
    reconnect_delay_s: float = 0.5  # between failed attempts to reach any node
    # The probes see the network 2+ blocks past what this node sent for this
    # long: fail over to another node (0 = off). A halted chain moves no one.
    head_stall_s: float = 10.0
    compress: bool = False  # permessage-deflate costs ~100s of KB per socket
    close_timeout_s: float = 2.0  # a close frame (4001, 1001) waits this long for the reply


@dataclass(frozen=True, slots=True)
class FiltersConfig:
    """Filters kept by the gateway (gateway/filters)."""

    ttl_s: float = 300.0  # a filter not polled this long expires (geth's 5 minutes)
    max_per_key: int = 100  # live filters per API key, all processes together
    # eth_getFilterChanges of a block filter returns at most this many hashes
    # per poll (the rest come next poll); a logs filter's span per poll is
    # the plan's eth_getLogs range limit.
    max_blocks_per_poll: int = 256
    # Polls remembered per logs filter (their last block's hash and the logs
    # they delivered; blocks per block filter) to see a re-org and send its
    # logs again with removed: true.
    reorg_polls: int = 16
    remember_bytes: int = 65_536  # delivered logs kept per filter for that, at most
    # What one key's filters may hold in Redis (which also holds every key,
    # limit and session): a log filter's topic alternatives per position, its
    # criteria's bytes, and the bytes of all the key's live filters together
    # (criteria and remembered logs; a poll past it keeps fewer logs).
    # A poll's eth_getLogs answer, at most: past it the poll asks for fewer
    # blocks (one block is read up to limits.max_buffered_answer_bytes), so an
    # eth_getFilterChanges answer a client does not read holds little memory.
    max_poll_bytes: int = 1_048_576
    max_topic_alternatives: int = 256
    max_filter_bytes: int = 65_536
    max_key_bytes: int = 2_097_152
