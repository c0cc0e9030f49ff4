"""Stand-ins for real nodes: mocknode (a lean JSON-RPC node for tests, the demo and bench)
and chainnode (a chain that advances, re-organises, lags and hangs, built on mocknode).

May import: tx.codec (the one transaction decoder; I/O-free, it imports nothing of the
gateway either, so the demo and the bench still take the mock nodes without it).
"""
