"""Serving: connection (timeouts, connection cap, refused bodies), listener (drain, the
port, the doors: server.door names ``door``, the lean one), runner (``gateway serve``,
the demo) and workers (the multi-process supervisor). ``gunicorn_app`` is the gunicorn entry point
(``gunicorn gateway.server:gunicorn_app``).

May import: app, ops, telemetry, redis, demo, alerts (the demo's rule and webhook), config,
typedefs, store.audit (the admin API's reload entry, written by the supervisor),
rpc.protocol and rpc.errors (error
replies and their CORS headers), rpc.http and rpc.replies (the lean door writes the HTTP
adapter's answers).
"""

from gateway.server.listener import gunicorn_app

__all__ = ["gunicorn_app"]
