"""The JSON-RPC call pipeline every transport feeds (pipeline, reads, forward, relay,
guard, ids, local methods, replies, insightrecord), delivery (a relayed answer written
and a node failure answered, for every transport), the HTTP adapter (http), protocol (types, parse;
no I/O), errors (the catalogue), auth (the key in a request), clientip and sinks (what
the pipeline knows of the store's counters: it does not import the store).

May import: limits, upstream, intel, identity, redis, ops, telemetry, config, typedefs.
"""
