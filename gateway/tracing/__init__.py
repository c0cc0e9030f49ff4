"""Traces of every call (OpenTelemetry over OTLP/HTTP): setup, the plug-in that builds
the tracer when ``tracing.otlp_endpoint`` is set and hands it to each pipeline.

A plug-in (``gateway.plugin``): nothing but ``app`` imports it, and with tracing off
it adds nothing to the app at all.

May import: rpc, telemetry, config, plugin, typedefs.
"""
