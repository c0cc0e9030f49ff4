"""The JSON-RPC endpoint: protocol (types, errors, parse; no I/O), handler (the flow),
auth (the key's shape and hash) and clientip (the client's address behind proxies).

May import: filters, limits, upstream, intel, store, redis, ops, config, typedefs.
"""
