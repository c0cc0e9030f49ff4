"""Filters kept by the gateway: store (state in Redis, owned by one
key, with TTL), changes (what a poll returns, re-orgs included), service (the
transport-neutral answers), methods (those answers as local methods of the one
pipeline, on both transports), nodepath (their node reads through the pipeline's read
path), logsread (how a poll turns a block range into reads), live (this worker's
count for the ``gateway_filters_live`` gauge) and setup (the plug-in that wires them in).

A plug-in (``gateway.plugin``), as ``ws`` is: it sits above ``rpc`` (its filter
reader ``rpc.params``, its local-method registry and read path) and nothing but
``app`` imports it.

May import: rpc, upstream, intel, store, redis, config, plugin, typedefs, telemetry.metrics
(the gauge's registry).
"""
