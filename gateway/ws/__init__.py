"""WebSocket JSON-RPC (SPEC §9): upgrade, sessions, fan-out, upstream subscriptions.

May import rpc, auth, limiter, config, metrics, upstream (the HTTP pool) and
accounts' Redis layout; nothing outside gateway.ws imports from here except
app.py (routes, setup) and typedefs.py (the app key).
"""
