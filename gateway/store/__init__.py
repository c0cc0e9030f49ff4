"""What lives in Redis besides admission: accounts, keys, sessions, security, per-key limits,
usage reading, request insight and upstream error counts.

May import: limits (key names, CIDR bits), rpc.auth and rpc.clientip (key shape, IP masks),
redis, config.
"""
