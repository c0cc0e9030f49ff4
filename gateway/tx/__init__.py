"""Raw transactions (every method that carries one; docs/TRANSACTIONS.md):
codec (decode and check a signed transaction with rlp / eth-keys; no I/O, the mock nodes
share it), checks (the methods' params and bounds), bucket (the per-sender and bundle
buckets in Redis), senders (those limits for one call), keymode (a key's own
private-transaction choice), routes (the fan-out and what counts as accepted), targets
(public nodes, private endpoints), methods (the handlers, as local methods of a network's
pipeline), txlog (the key's transaction log) and setup.

A plug-in of the pipeline, as ``filters`` is: nothing but ``app`` imports it (and the
demo, its codec).

May import: rpc, upstream, intel, store, redis, limits, ops, telemetry, config, typedefs, plugin.
"""
