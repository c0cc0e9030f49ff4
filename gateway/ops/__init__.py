"""Operating the gateway: routes (/healthz, /readyz), metrics (Prometheus collectors),
metricsport (the separate /metrics listener) and accesslog (lines that never hold a key).

May import: config, typedefs; routes also upstream and redis (readiness).
"""
