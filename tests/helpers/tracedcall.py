"""``python -m tests.helpers.tracedcall REDIS_URL PREFIX BSC OPBNB ENDPOINT``: one served call.

Serves the real app in this fresh process (``tracing.otlp_endpoint = ENDPOINT``,
"" for off), answers one ``eth_getBalance`` of a new key, and prints as JSON
the tracing modules this process loaded and the threads it ran, so a test can
tell that tracing off never loads or starts any of it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import aiohttp

from gateway import typedefs as T
from gateway.config import config_from_dict
from tests.helpers.served import served

TRACING_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "gateway.telemetry.tracer")


async def main(redis_url: str, prefix: str, bsc: str, opbnb: str, endpoint: str) -> None:
    cfg = config_from_dict(
        {
            "redis": {"url": redis_url, "prefix": prefix},
            "server": {"metrics_listen": ""},
            "networks": {"bsc": {"upstreams": [bsc]}, "opbnb": {"upstreams": [opbnb]}},
            "tracing": {"otlp_endpoint": endpoint},
        }
    )
    async with served(cfg) as gw:
        await gw.app[T.POOLS]["bsc"].probe_once()
        store = gw.app[T.STORE]
        account = await store.create_account("traced@example.com", "correct horse battery")
        key, _ = await store.create_key(account.id, name="traced")
        params = ["0x" + "ab" * 20, "latest"]
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": params}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{gw.url}/bsc/{key}", json=body) as resp,
        ):
            answer = await resp.json()
        assert "result" in answer, answer
        threads = [t.name for t in threading.enumerate()]
    loaded = sorted(m for m in sys.modules if m.startswith(TRACING_MODULES))
    print(json.dumps({"loaded": loaded, "threads": threads}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
