"""The operator's admin API (``/admin/*`` on the metrics listener): api (the app, its
token check and audit, the plug-in's ``add_admin_routes``), nodes (listing, cordons),
records (accounts and keys, as the CLI does them), reload and the workers' socket.

May import: config, typedefs, store, upstream, ops (the token check), redis, telemetry,
cli.accountlist (the account list the CLI prints),
plugin.
"""

from gateway.admin.api import add_admin_routes, admin_source, caller, plug_admin

__all__ = ["add_admin_routes", "admin_source", "caller", "plug_admin"]
