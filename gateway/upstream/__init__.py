"""Talking to nodes: pool (pick, retry, hedge), lifecycle (start, probe, in and out of
rotation, close), node, transport (the lean client in nodeclient, or aiohttp), errors,
health (probes that verify the chain) and newheads (the head from each node's subscription).

May import: intel, telemetry.metrics, telemetry.tracer (the type of the pool's tracer), config,
redis (failurelog: rate-limited failure lines).
"""
