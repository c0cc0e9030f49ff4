"""What lives in Redis besides admission: one ``Store`` facade (accounts.py) composed of
accounts, apikeys, sessions, attempts (throttles), usage and passwords over core, plus
security, per-key limits (keylimits), request insight and upstream error counts;
keylimits and insightquery build on planview (the Store plus the plans by name).

May import: limits.limiter (CIDR bits), identity (key shape, IP masks), redis (clients;
keyspace names every key), config.
"""
