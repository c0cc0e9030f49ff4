"""Telemetry every layer reports to: metrics (the Prometheus collectors, one registry
per app) and tracer (OpenTelemetry spans, imported only when tracing is on). Below
the pools, the pipeline, the WebSocket service and the ops routes, which all count
or trace here, so it may depend on none of them.

May import: intel (the cache, head and hedge counters it copies at scrape time), config
(the tracing section).
"""
