"""Names vulture calls unused in gateway/ that are used, each with the reason.

Read by tests/unit/test_dead_code.py (vulture's whitelist format: the file is
parsed, never run). Keep it short: a name belongs here only when its user is
outside the scanned code (a framework calling back, a template, a test
observing the product). Dead code is deleted, not listed.
"""

# ruff: noqa: B018
from typing import Any

_: Any = None

# -- called by a framework, not by our code --------------------------------------
_.charset  # aiohttp Response attribute set in ops.routes.metrics
_.handle_error  # aiohttp RequestHandler override (server.connection): malformed HTTP
_._task  # read and cleared by aiohttp's RequestHandler.start() loop (server.door's LeanCall)
_._request_in_progress  # read by aiohttp's RequestHandler.shutdown() (server.door): drain
_._current_request  # read by aiohttp's connection_lost() / shutdown() (server.door)
_._cancel  # called on _current_request by aiohttp: wakes the lean call's body read
_.on_message_begin  # httptools parser callbacks (demo.framing)
_.on_header
_.on_headers_complete
_.on_body
_.on_message_complete
_.do_GET  # http.server handler methods (ops.metricsport): called by BaseHTTPRequestHandler
_.do_POST  # (the same: the admin API's writes, relayed to a worker)
_.do_PATCH
_.do_DELETE
_.close_connection  # read by BaseHTTPRequestHandler: a 413's unread body ends the connection
_.log_message  # http.server override (ops.metricsport): silences its stderr log
_.daemon_threads  # socketserver.ThreadingMixIn attribute (ops.metricsport)
_.address_family  # socketserver.TCPServer attribute (ops.metricsport): IPv6 bind

# -- read by Jinja templates (dashboard/templates/key_requests.html) -------------
_.error_count  # store.insightquery.MethodRow
_.time_ms  # store.insightquery.LogRow

# -- the functions the admin API calls (gateway.alerts.api), tested through them -
_.delivery_log  # GET /admin/accounts/<email>/webhooks/<id>; tests/integration/test_alerts_*.py

# -- demo nodes: the API the tests and bench drive (mine, reorg, inspect) --------
_.advance  # demo.chainnode.ChainNode
_.reorg  # demo.chainnode / demo.mockws Chain
_.start_chain_node  # demo.chainnode: tests/integration/test_intel_*.py
_.start_demo_nodes  # demo.mockws: tests/integration/test_ws_bench.py
_.set_head_offset  # demo.mocknode: tests/integration/test_upstream.py
_.open_connections  # demo.mocknode, upstream.nodeclient: connection reuse is asserted
_.subscribe_calls  # demo.mockws: what a node was asked, for test assertions
_.unsubscribe_calls
_.active_subscriptions

# -- in-process mirrors of exported metrics, read by tests -----------------------
# (the Prometheus series is the product's face; these plain ints let a test
# read one process's count without scraping)
_.stores  # intel.cache.CacheStats
_.too_big
_.reorgs  # intel.head.HeadTracker
_.retries  # intel.hedge.HedgeStats
_.rejected  # server.connection connection watch
_.timeouts

# -- queries kept for tests, to be decided by their owners (see the report) ------
_.has  # intel.head.HeadTracker.has: tests/unit/test_intel_head.py only
_.at_head  # intel.head.HeadTracker.at_head: tests only
_.age  # intel.head.HeadTracker.age: tests only
_.healthy_count  # upstream.pool.NodePool.healthy_count: tests only (summary() serves /readyz)
