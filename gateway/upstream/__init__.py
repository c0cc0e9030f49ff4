"""Talking to nodes: pool (pick, retry, health probes) and nodeclient (the lean HTTP/1.1 client).

May import: intel, ops (metrics), config.
"""
