"""What lives in Redis besides admission: one ``Store`` facade (accounts.py) composed of
accounts, apikeys, sessions, attempts (throttles), usage and passwords over core, plus
security, per-key limits (keylimits), request insight and upstream error counts.

May import: limits.limiter (CIDR bits), rpc.auth (key shape), rpc.clientip (IP masks),
redis (clients; keyspace names every key), config.
"""
