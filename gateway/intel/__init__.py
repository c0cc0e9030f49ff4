"""Upstream intelligence: heads, the finality-aware cache, coalescing, the logs guard, hedging.

I/O-light building blocks that the node pool (upstream), the call pipeline (rpc) and
the filters plug in (docs/INTEL_DESIGN.md), never the other way round: nothing here
imports the pipeline, the pool or the transports.

May import: config.
"""
