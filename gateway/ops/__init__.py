"""Operating the gateway: routes (/healthz, /readyz), metrics (Prometheus collectors),
metricsport (the separate /metrics listener) and accesslog (lines that never hold a key).

May import: config, typedefs, upstream (readiness), redis (readiness), intel (the
cache, head and hedge counters that metrics copies into Prometheus).
"""
