"""The configuration's shape: frozen dataclasses, one per TOML section, and ConfigError.

Nothing is mutable after loading: the app gets one ``Config`` and passes pieces
down. Field defaults are the shipped defaults; load.py type-checks every TOML
value against these annotations. ``[ws]`` and ``[filters]``: listening.py;
``[head]``: head.py; ``[tracing]``: tracing.py; the node table's entries:
nodeshape.py. It stays whole because load.py takes its sections from
``Config``'s fields: one file is the whole list of settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config.admin import AdminConfig
from gateway.config.alerts import AlertsConfig
from gateway.config.errors import ConfigError as ConfigError  # re-exported
from gateway.config.head import HeadConfig
from gateway.config.listening import FiltersConfig, WsConfig
from gateway.config.nodeshape import MethodRoute, NodeConfig
from gateway.config.tracing import TracingConfig


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8545
    workers: int = 1
    access_log: bool = True
    # aiohttp has no header-read timeout of its own (gateway/server/connection.py adds it).
    # Seconds a client may take to send request headers (from connection open
    # or its first byte) and then its body; 0 turns a check off.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_connections: int = 10_000  # per process; 0 = no cap
    drain_timeout_s: float = 15.0  # SIGTERM: in-flight calls get this long to finish
    # SIGTERM: for this long after the port closes, keep-alive connections may
    # still send, answered with Connection: close, before idle ones are closed
    # (closing them at once loses a call a client sends at that moment)
    drain_notice_s: float = 1.0
    # Trust X-Forwarded-For from these proxies (CIDRs) for the IP allowlist.
    trusted_proxies: tuple[str, ...] = ()
    # An answer the client leaves unread (the socket's write buffer stays
    # full) for this long drops the connection; 0 turns the check off.
    write_timeout_s: float = 30.0
    # A refused body is never read (413, 415, ...): the answer says
    # Connection: close, the gateway half-closes, and what the client still
    # sends is dropped unparsed for at most this long (so the answer is not
    # lost to a reset), then the connection is closed.
    refused_linger_s: float = 2.0
    # /metrics is served here, never on the public port; "" turns it off.
    # With several workers one of them holds it at a time (gateway/ops/metricsport.py).
    metrics_listen: str = "127.0.0.1:9464"
    # `serve --workers`: a worker that dies is restarted after this delay,
    # doubled for each quick death in a row, at most restart_backoff_max_s.
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    # SIGHUP: new workers get this long to listen before the old ones drain anyway.
    worker_ready_timeout_s: float = 30.0
    # Python's garbage collector, tuned for a server (docs/PERFORMANCE.md): at
    # 1,024 connections the default gen-0 threshold (700) made full
    # collections 26 % of the CPU. Objects made at start-up are frozen out of
    # every collection; 0 keeps Python's defaults.
    gc_gen0_threshold: int = 50_000
    # What /readyz needs for a 200 (docs/DEPLOYING.md "Readiness"): "redis",
    # "any_network" (at least one network has a node in service),
    # "all_networks", or a network's name (that network has one).
    ready_requires: tuple[str, ...] = ("redis", "any_network")
    # Which code answers RPC POSTs: "lean" (gateway/server/door.py: the RPC
    # paths on aiohttp's parser without its request/response objects; every
    # other path, and WebSocket upgrades, go to the application on the same
    # port) or "app" (aiohttp's web.Application for every path: the same
    # answers, byte for byte, at about 1.4x the CPU per call).
    door: str = "lean"


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_body_bytes: int = 1_048_576  # after inflating a gzip / deflate body
    # A compressed body that inflates past this many times its compressed size
    # (once past 64 KiB inflated) is refused with 413: a bomb is stopped early.
    max_inflate_ratio: int = 100
    max_batch: int = 1000  # viem's own default batch, what hosted endpoints take
    max_json_depth: int = 64
    upstream_connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 10.0
    max_in_flight: int = 2_048
    # eth_getLogs block ranges (to - from + 1) above this answer -32602 before
    # any node sees them; a plan's own max_logs_range overrides it; 0 = none.
    max_logs_range: int = 10_000
    # A node's answer above this is refused (502); larger ones are streamed.
    max_response_bytes: int = 256 * 1024 * 1024
    # An answer that cannot be relayed in pieces (a batch's, which is parsed to
    # put each id back, or one whose id is neither in its head nor its last
    # member) is read whole up to this and refused (502) above it: relaying
    # holds bounded memory.
    max_buffered_answer_bytes: int = 16 * 1024 * 1024
    # A call the bucket will have room for within this many seconds waits for
    # it instead of being refused (a plan's own max_wait_s overrides it; 0 =
    # refuse at once); at most max_waiting calls of one key wait at once in
    # each gateway process, past them a call is refused as before.
    max_wait_s: float = 1.0
    max_waiting: int = 32


@dataclass(frozen=True, slots=True)
class RedisConfig:
    url: str = ""  # empty: embedded redis-server under data_dir
    data_dir: str = ".gateway-data"
    cluster: bool = False
    fail_open: bool = False
    timeout_ms: int = 250
    connect_timeout_ms: int = 500
    max_connections: int = 64
    prefix: str = "gw"
    # Hot-path Redis failures: at most one log line per this many seconds.
    failure_log_interval_s: float = 10.0


@dataclass(frozen=True, slots=True)
class BuilderConfig:
    """One endpoint of a network's private route, in its own dialect (config/txconfig.py).

    Secrets are never here: ``auth_header_env`` / ``sign_key_env`` name
    environment variables read when the gateway starts.
    """

    url: str
    name: str  # shown on the dashboard, in logs and as a metric label
    dialect: str = "plain"  # "plain" | "48club" | "blockrazor" | "bloxroute"
    auth_header_env: str = ""  # the Authorization header's value (bloXroute's key)
    sign_key_env: str = ""  # 48 Club: the SoulPoint member's private key (hex)
    # The builder's own status method (params [hash], result {status, blockNumber?}),
    # asked while a transaction it accepted is followed; "" = not asked.
    status_method: str = ""
    status_batch: bool = False  # the status calls of a round go in one JSON-RPC batch


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    name: str
    prefix: str
    chain_id: int
    upstreams: tuple[str, ...]
    methods: frozenset[str]
    # Nodes' WebSocket URLs for subscriptions; default: each HTTP upstream
    # with the ws/wss scheme.
    ws_upstreams: tuple[str, ...] = ()
    nodes: tuple[NodeConfig, ...] = ()  # the node table (config/nodes.py node_table)
    routes: Mapping[str, MethodRoute] = field(default_factory=dict)  # extra_methods tables
    # Raw transactions (config/txconfig.py, docs/TRANSACTIONS.md): "all" nodes at
    # once or "one"; the private route's endpoints; the per-sender limit.
    tx_broadcast: str = "all"
    private_tx: tuple[str, ...] = ()
    tx_per_sender_rate: float = 5.0  # per second per sender, all processes; 0 = none
    tx_per_sender_burst: int = 20
    tx_timeout_s: float = 5.0  # one send to a node or a private endpoint
    tx_max_bytes: int = 128 * 1024  # one raw transaction (geth's limit), blobs aside
    tx_bundle_max: int = 50  # transactions in one eth_sendBundle
    # The private route's endpoints with their dialects (private_tx's entries).
    builders: tuple[BuilderConfig, ...] = ()
    # A private transaction is followed until included, replaced or this many
    # blocks after it was sent (or its bundle's maxBlockNumber).
    tx_track_blocks: int = 200
    tx_track_interval_s: float = 1.0  # one receipt check of the transactions followed
    # The network's block interval in seconds: without a live newHeads the
    # probe runs twice per block (0 = probe_interval_s only). It never judges a
    # node's speed: a node catching up runs fast and is right.
    block_time_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PlanConfig:
    name: str
    title: str
    rate: float  # sustained compute units per second
    burst: int  # bucket size
    daily_quota: int = 0  # compute units per UTC day, 0 = none
    weights: Mapping[str, int] = field(default_factory=dict)
    max_logs_range: int = 0  # 0 = limits.max_logs_range
    max_wait_s: float | None = None  # None = limits.max_wait_s; 0 = never wait
    # Price shown as the estimated cost (compute units x price / 1e6); 0 = free.
    price_per_million_cu: float = 0.0
    # WebSocket caps (0 = the [ws] section's defaults).
    ws_max_sockets: int = 0  # open sockets per key, across every gateway process
    ws_max_subscriptions: int = 0  # subscriptions per socket
    # The "prefix*" keys of ``weights`` as (prefix, units), longest first (derived
    # at load); an exact name in ``weights`` wins over them.
    weight_patterns: tuple[tuple[str, int], ...] = ()
    # The private route of the plan's keys ("on" | "fallback" | "off") and its
    # eth_sendBundle rate per key (config/txconfig.py).
    private_tx: str = "off"
    bundle_rate: float = 1.0  # 0 = none
    bundle_burst: int = 5

    def cost(self, method: str) -> int:
        """Compute units charged for one call of ``method``."""
        units = self.weights.get(method)
        if units is not None:
            return units
        for prefix, units in self.weight_patterns:
            if method.startswith(prefix):
                return units
        return 1


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    probe_interval_s: float = 3.0
    max_lag_blocks: int = 20
    fail_threshold: int = 3
    cooldown_s: float = 15.0
    retry_budget: float = 0.2
    max_attempts: int = 3
    connections_per_node: int = 256
    # One attempt's cap inside limits.upstream_timeout_s, so a slow node
    # leaves time to fail over; 0 = the whole deadline.
    attempt_timeout_s: float = 5.0
    probe_timeout_s: float = 2.0
    client: str = "lean"  # "lean" (gateway.upstream.nodeclient) or "aiohttp" (ClientSession)
    keepalive_s: float = 15.0  # idle pooled connections to a node are closed after this
    # The network head follows each node's newHeads subscription (its
    # ws_upstreams URL); polling (probe_interval_s) stays the fallback.
    ws_heads: bool = True
    ws_reconnect_min_s: float = 0.5  # a lost head subscription is retried after this,
    ws_reconnect_max_s: float = 30.0  # doubled per failure in a row up to this
    # Upstream failure lines: at most one per node and kind per this many seconds.
    failure_log_interval_s: float = 30.0
    logs_split_concurrency: int = 4  # chunks of one split eth_getLogs at nodes at once
    # Node calls one eth_getLogs may make (its chunks); a range needing more answers -32602.
    logs_max_chunks: int = 64


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The finality-aware answer cache and request coalescing (gateway/intel)."""

    enabled: bool = True
    max_bytes: int = 64 * 1024 * 1024  # per network per worker, keys + answers + overhead
    max_entry_bytes: int = 1024 * 1024  # one answer above this is not cached
    coalesce: bool = True  # identical concurrent reads share one node call
    # Optional shared tier in Redis for answers that can never change (final).
    # Off by default: a lookup is a second Redis round trip on a local miss.
    redis: bool = False
    redis_ttl_s: float = 3600.0
    redis_max_bytes: int = 256 * 1024 * 1024  # bytes written within one TTL, all workers
    redis_max_entry_bytes: int = 256 * 1024


@dataclass(frozen=True, slots=True)
class HedgeConfig:
    """Hedged reads: a second node is asked when the first is slower than its p95."""

    enabled: bool = True
    floor_s: float = 0.05  # never hedge sooner than this
    ceiling_s: float = 0.5  # never wait longer than this (also the delay before samples)
    percentile: float = 0.95
    window: int = 64  # recent latencies kept per node


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    enabled: bool = True
    session_max_age_s: int = 7 * 24 * 3600
    secure_cookies: bool = False
    public_url: str = ""  # shown in endpoint examples; empty = from the request
    # Account security (gateway/store/security.py, gateway/dashboard/account_security.py).
    reset_link_ttl_s: int = 3600  # `gateway accounts reset-password` links work this long, once
    login_code_ttl_s: int = 300  # time to type the two-step code after the password
    login_code_attempts: int = 5  # wrong codes per password entry before starting over
    recovery_codes: int = 10  # recovery codes issued when two-step log-in is turned on
    session_seen_interval_s: int = 60  # "last seen" of a session is written at most this often
    max_sessions_per_account: int = 50  # a log-in past this ends the account's oldest session
    max_keys_per_account: int = 20  # keys still in a rotation grace period count
    # Revoked and expired key records are deleted this long after they stop
    # working, and an account keeps at most max_inactive_keys of them (oldest
    # go first): records never pile up and the keys page stays small.
    inactive_key_retention_s: int = 30 * 86_400
    max_inactive_keys: int = 20
    # Log-in throttle, counted BEFORE the password is checked (fixed windows).
    # Per (email, client IP) and per client IP (IPv6 grouped by /64), plus a
    # looser per-email ceiling against slow guessing from many addresses; an
    # (email, IP) pair that logged in within login_remember_s skips that
    # ceiling, so strangers cannot lock the owner out.
    login_window_s: int = 900
    login_per_email_ip: int = 5
    login_per_ip: int = 20
    login_email_window_s: int = 3_600
    login_per_email: int = 30
    login_remember_s: int = 30 * 86_400
    signup_window_s: int = 3_600
    signup_per_ip: int = 10  # each sign-up costs an argon2 hash
    # argon2 runs in this many threads at most, off the event loop; a log-in
    # that waits longer than password_hash_wait_s for one answers 503.
    password_hash_threads: int = 2
    password_hash_wait_s: float = 5.0


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """How requests are admitted (gateway.limits.leasing).

    ``lease``: each worker leases slices of a key's bucket and admits locally,
    caches key records (pub/sub invalidation) and flushes usage each
    ``usage_flush_s``; about one Redis call per slice instead of per request.
    ``exact``: one admission script call per request (admit.lua).
    """

    mode: str = "lease"
    key_ttl_s: float = 5.0  # cached key records are re-read at least this often
    lease_horizon_s: float = 0.05  # a slice covers this much of a key's recent rate
    max_slice: int = 1000  # units a lease may add beyond the request's own cost
    lease_idle_s: float = 0.25  # unused leased units go back after this long unused
    usage_flush_s: float = 1.0  # usage counters summed in-process are written this often


@dataclass(frozen=True, slots=True)
class InsightConfig:
    """Request insight per key (gateway/store/insight.py): summed in each worker, flushed."""

    enabled: bool = True
    interval_s: float = 1.0  # a worker writes its sums this often (a crash loses at most this)
    log_cap: int = 200  # failed or rate-limited calls kept per key (the Requests page)
    log_ttl_s: int = 7 * 24 * 3600  # a key's call log is dropped this long after its last entry
    max_keys: int = 10_000  # distinct keys summed per worker between flushes; more are dropped


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Log lines: ``format = "text"`` (one line of key=value) or ``"json"`` (JSON lines)."""

    format: str = "text"


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = ServerConfig()
    limits: LimitsConfig = LimitsConfig()
    redis: RedisConfig = RedisConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    dashboard: DashboardConfig = DashboardConfig()
    cache: CacheConfig = CacheConfig()
    hedge: HedgeConfig = HedgeConfig()
    head: HeadConfig = field(default_factory=HeadConfig)
    insight: InsightConfig = InsightConfig()
    admission: AdmissionConfig = AdmissionConfig()
    ws: WsConfig = field(default_factory=WsConfig)  # frozen: a fresh one equals a shared one
    log: LogConfig = LogConfig()
    tracing: TracingConfig = field(default_factory=TracingConfig)
    filters: FiltersConfig = field(default_factory=FiltersConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)  # read by config.adminload
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    networks: tuple[NetworkConfig, ...] = ()
    plans: tuple[PlanConfig, ...] = ()
    default_plan: str = "free"

    def plan(self, name: str) -> PlanConfig:
        for plan in self.plans:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def network(self, name: str) -> NetworkConfig:
        for net in self.networks:
            if net.name == name:
                return net
        raise KeyError(name)

    def max_logs_range(self, plan: str) -> int:
        """The eth_getLogs range limit of ``plan`` (0 = none)."""
        for p in self.plans:
            if p.name == plan and p.max_logs_range:
                return p.max_logs_range
        return self.limits.max_logs_range

    def max_wait_s(self, plan: str) -> float:
        """How long a call of ``plan`` may wait for its bucket (0 = refused at once)."""
        for p in self.plans:
            if p.name == plan and p.max_wait_s is not None:
                return p.max_wait_s
        return self.limits.max_wait_s


def data_dir(cfg: Config) -> Path:
    """Where the embedded Redis keeps its files, with ``~`` expanded."""
    return Path(cfg.redis.data_dir).expanduser()
