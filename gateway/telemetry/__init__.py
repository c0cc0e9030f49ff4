"""Telemetry every layer reports to: metrics (the Prometheus collectors, one registry
per app). Below the pools, the pipeline, the WebSocket service and the ops routes,
which all count here, so it may depend on none of them.

May import: intel (the cache, head and hedge counters it copies at scrape time).
"""
