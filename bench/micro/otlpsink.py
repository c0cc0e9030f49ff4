"""``python -m bench.micro.otlpsink``: an OTLP/HTTP endpoint that takes spans and drops them.

A stand-in collector for measuring the gateway with tracing on
(``python -m bench.micro.pipeline --tracing``): it answers every ``POST
/v1/traces`` with an empty ``ExportTraceServiceResponse`` (zero bytes are a
valid one) and keeps nothing, so the gateway's exporter does all its work
(encoding, the HTTP round trip) while the sink's own CPU stays out of the
gateway's figure (it runs as another process, on the other CPUs). It prints
its URL on the first line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web

from bench.loadgen import _new_loop


async def _export(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


async def _serve(port: int) -> None:
    """Serve until SIGTERM (its default action ends the process)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", _export)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.micro.otlpsink", description=__doc__)
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    args = p.parse_args(argv)
    loop = _new_loop()
    try:
        loop.run_until_complete(_serve(args.port))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
