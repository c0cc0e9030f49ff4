"""Filters kept by the gateway (SPEC §10 "Filters"): reader (the filter object, read as
geth reads it), store (state in Redis, owned by one key, with TTL), changes (what a poll
returns, re-orgs included), service (the transport-neutral answers) and nodepath (the
node path a filter's reads take today).

May import: rpc.protocol (the error catalogue), upstream, intel, redis, config.
"""
