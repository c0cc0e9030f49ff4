"""WebSocket JSON-RPC: upgrade, sessions, fan-out, upstream subscriptions.

Nothing outside gateway.ws imports from here except app.py (routes, setup).

May import: rpc, limits, upstream, redis, ops, telemetry, config, typedefs, plugin.
"""
