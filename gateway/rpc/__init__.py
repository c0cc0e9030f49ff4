"""The JSON-RPC call pipeline every transport feeds (pipeline, reads, forward, relay,
guard, ids, local methods, replies), the HTTP adapter (http), protocol (types,
errors, parse; no I/O), auth (the key's shape and hash) and clientip.

May import: limits, upstream, intel, store, redis, ops, config, typedefs.
"""
