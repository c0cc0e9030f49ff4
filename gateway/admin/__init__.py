"""The operator's admin API (``/admin/*`` on the metrics listener): api (the app, its
token check and audit, the plug-in's ``add_admin_routes``), calls (what a handler
uses: the gateway app, the caller, JSON in and out, its audit line), nodes (listing, cordons),
records (accounts and keys, as the CLI does them), reload and the workers' socket.

May import: config, typedefs, store, upstream, ops (the token check), redis, telemetry,
plugin.
"""

from gateway.admin.api import add_admin_routes, plug_admin
from gateway.admin.calls import admin_source, answer, audit, body_of, caller

__all__ = [
    "add_admin_routes",
    "admin_source",
    "answer",
    "audit",
    "body_of",
    "caller",
    "plug_admin",
]
