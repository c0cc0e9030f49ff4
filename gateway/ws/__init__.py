"""WebSocket JSON-RPC (SPEC §9): upgrade, sessions, fan-out, upstream subscriptions.

Nothing outside gateway.ws imports from here except app.py (routes, setup).

May import: rpc, filters, limits, upstream, redis, ops, config, typedefs.
"""
