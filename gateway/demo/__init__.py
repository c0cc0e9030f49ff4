"""Stand-ins for real nodes: mocknode (a lean JSON-RPC node for tests, the demo and bench)
and chainnode (a chain that advances, re-organises, lags and hangs, built on mocknode).

May import: nothing else of gateway.
"""
