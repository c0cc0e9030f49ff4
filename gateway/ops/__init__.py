"""Operating the gateway: routes (/healthz, /readyz), metricsport (the separate /metrics
listener, serving ``telemetry.metrics``) and accesslog (lines that never hold a key).

May import: config, tasks, typedefs, upstream (readiness), redis (readiness), telemetry (the
collectors it serves).
"""
