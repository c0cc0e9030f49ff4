"""Raw transactions (``eth_sendRawTransaction``, ``eth_sendBundle``): codec (decode and
check a signed transaction with eth-keys / rlp; no I/O, the mock nodes share it),
sender (the per-sender limit in Redis), routes (public broadcast, private endpoints),
methods (both as local methods of a network's pipeline), keymode (a key's own
private-transaction choice), txlog (the key's transaction log) and metrics.

A plug-in of the pipeline, as ``filters`` is: nothing but ``app`` imports it
(and the demo, its codec).

May import: rpc, upstream, intel, store, redis, limits, ops, config, typedefs.
"""
