"""Upstream intelligence: heads, the finality-aware cache, coalescing, the logs guard, hedging.

I/O-light building blocks the node pool and the handler plug in (docs/INTEL_DESIGN.md);
may import gateway.config only, never the handler, the pool or the transports.
"""
