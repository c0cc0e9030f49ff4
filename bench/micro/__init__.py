"""Micro-benchmarks that justify the hand-written fast paths.

Each module measures one fast path against the library call it replaces,
the same way (closed loop, same concurrency, the far side in another process
on another CPU), and prints client CPU microseconds per call, so a claim in a
docstring can be re-checked on any machine:

* ``python -m bench.micro.nodeclient``: gateway/nodeclient.py and the load
  generator's client vs ``aiohttp.ClientSession``;
* ``python -m bench.micro.redismux``: ``EVALSHA`` through gateway/redismux.py
  vs ``redis.asyncio``;
* ``python -m bench.micro.watchdog``: gateway/server.py's ``GatewayRunner``
  (slow-client watchdog, connection cap) vs plain ``web.AppRunner``;
* ``python -m bench.micro.admission``: CPU per call of the leased admission
  path's pieces (gateway/limits/leasing.py, gateway/store/usagesink.py,
  ``ip_bits``), in-process, best of several runs;
* ``python -m bench.micro.callpath``: not a speed but a shape, the gateway
  packages one HTTP call crosses on its way from the door and back.

Every module takes ``--json``.
"""
