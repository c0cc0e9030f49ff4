"""The offline demo (``gateway serve --demo``): an embedded Redis, one mock node and
one mock builder per network (HTTP and WebSocket, blocks at the network's own pace:
0.45 s on BSC, 0.25 s on opBNB), a demo account and keys, and a banner that says
how to call it. ``server.runner`` serves the app made here like any other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

from aiohttp import web

from gateway import typedefs as T
from gateway.alerts import api as alerts_api
from gateway.app import create_app
from gateway.config import BuilderConfig, Config, NetworkConfig
from gateway.demo.alertsink import AlertSink
from gateway.demo.mockbuilder import lands_on, start_mock_builder
from gateway.demo.mockws import Chain, start_ws_node
from gateway.redis.embedded import RedisProcess
from gateway.redis.keyspace import record_key

# The real networks' block times (BSC since Fermi, opBNB since Fourier): the
# demo's nodes make blocks at that pace, never on demand, so a dapp meets the
# timing it will meet on the chain (ethers' 250 ms request cache, receipts a
# block later). Another chain id gets BSC's.
DEMO_BLOCK_TIME_S = {56: 0.45, 97: 0.45, 204: 0.25, 5611: 0.25}
# BSC's fast finality settles a block about 1.1 s after it is made.
DEMO_FINALITY_DEPTH = 3

DEMO_EMAIL = "demo@example.com"
# The demo's alert rule: the free plan's burst is 50 calls, so 100 at once get
# more than this many refused.
DEMO_ALERT_THRESHOLD = 5
DEMO_PASSWORD = "demo-password"


@contextlib.contextmanager
def demo_app(cfg: Config) -> Iterator[Awaitable[web.Application]]:
    """The demo's app (to be awaited), over an embedded Redis that lives while inside."""
    tmp = tempfile.TemporaryDirectory(prefix="gateway-demo-")
    redis_proc = RedisProcess(Path(tmp.name), persist=False)
    url = redis_proc.start()

    async def build() -> web.Application:
        # one HTTP + WebSocket mock node per network, making blocks at the
        # network's own pace (so eth_subscribe works in the demo too, and a
        # dapp waits for its receipt as on the real chain); and a mock builder
        # (the private route)
        nodes, builders = [], []
        for net in cfg.networks:
            chain = Chain(
                net.chain_id,
                block_time_s=demo_block_time(net.chain_id),
                finality_depth=DEMO_FINALITY_DEPTH,
            )
            nodes.append(await start_ws_node(chain))
            builders.append(await start_mock_builder(net.chain_id, lands_on(chain)))
            chain.start()
        networks = tuple(
            dataclasses.replace(
                net,
                upstreams=(n.url,),
                ws_upstreams=(n.ws_url,),
                private_tx=(b.url,),
                builders=(BuilderConfig(b.url, "demo-builder"),),
            )
            for net, n, b in zip(cfg.networks, nodes, builders, strict=True)
        )
        demo_cfg = dataclasses.replace(
            cfg,
            networks=networks,
            redis=dataclasses.replace(cfg.redis, url=url),
            # No access log: a line per request would scroll the banner (the key,
            # the CLI line) away; the dashboard's Requests page shows the calls.
            server=dataclasses.replace(cfg.server, access_log=False),
            # the demo's webhook receiver listens on loopback
            alerts=dataclasses.replace(cfg.alerts, allow_private_targets=True),
        )
        app = create_app(demo_cfg)

        async def nodes_ctx(app: web.Application) -> AsyncIterator[None]:
            try:
                yield
            finally:
                for node, builder in zip(nodes, builders, strict=True):
                    await node.close()
                    await node.chain.stop()
                    await builder.close()

        # first in, so last out: the pools and head followers stop before their
        # nodes do (stopped after them, each logged a probe failure on the way out)
        app.cleanup_ctx.insert(0, nodes_ctx)
        sink = AlertSink(show=lambda line: print(line, flush=True))

        async def sink_ctx(app: web.Application) -> AsyncIterator[None]:
            await sink.start()
            try:
                yield
            finally:
                await sink.close()

        app.cleanup_ctx.insert(0, sink_ctx)
        app.on_startup.append(lambda app: _demo_key(app, sink))
        return app

    try:
        yield build()
    finally:
        redis_proc.stop()
        tmp.cleanup()


def demo_block_time(chain_id: int) -> float:
    """How often the demo's node for ``chain_id`` makes a block (seconds)."""
    return DEMO_BLOCK_TIME_S.get(chain_id, DEMO_BLOCK_TIME_S[56])


async def _demo_key(app: web.Application, sink: AlertSink) -> None:
    cfg = app[T.CONFIG]
    store = app[T.STORE]
    acct = await store.create_account(DEMO_EMAIL, DEMO_PASSWORD, "free")
    key, _ = await store.create_key(acct.id, name="demo", env="development")
    private, rec = await store.create_key(acct.id, name="demo-private", env="development")
    # as `gateway keys update --private-tx on` does (nothing cached it yet: no publish)
    await store.redis.hset(record_key(store.prefix, await store.key_hash_of(rec.id)), "ptx", "on")
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    print(_demo_banner(base, key, cfg.networks, cfg.redis.url), flush=True)
    print(f"Demo API key with private transactions on (mock builder): {private}\n", flush=True)
    print(await _demo_alert(app, sink), flush=True)


async def _demo_alert(app: web.Application, sink: AlertSink) -> str:
    """One rate_limited rule and the loopback receiver as the account's webhook; the lines
    that say how to see it fire."""
    cfg = app[T.CONFIG]
    store = app[T.STORE]
    hook = await alerts_api.create_webhook(store, cfg.alerts, DEMO_EMAIL, sink.url)
    sink.secret = hook["secret"]
    await alerts_api.create_rule(
        store, cfg.alerts, DEMO_EMAIL, "rate_limited", DEMO_ALERT_THRESHOLD, 300
    )
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    first = cfg.networks[0].prefix if cfg.networks else "/bsc"
    body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    return "\n".join(
        [
            f"Alerts: the demo account has a rule (more than {DEMO_ALERT_THRESHOLD} rate-limited "
            "calls in 5 minutes) and a webhook",
            f"on a receiver here ({sink.url}) that prints what it gets. Send 100 calls at once",
            f"(the free plan's burst is 50) to see a rate_limited alert here within about "
            f"{cfg.alerts.interval_s + 1:g} s, and on {base}/dashboard/alerts:",
            f"  curl -sZ -o /dev/null -w '%{{http_code}}\\n' -X POST "
            f"\"{base}{first}/$RPC_KEY?n=[1-100]\" -H 'Content-Type: application/json' "
            f"-d '{body}' 2>/dev/null | sort | uniq -c",
            "",
        ]
    )


def _python() -> str:
    """How to name this interpreter in a line to paste: ``python`` where that is the one
    running now (a venv's), else its full path (the gateway's package is installed there)."""
    found = shutil.which("python")
    if found and Path(found).resolve() == Path(sys.executable).resolve():
        return "python"
    return shlex.quote(sys.executable)


def _demo_banner(
    base: str,
    key: str,
    networks: tuple[NetworkConfig, ...],
    redis_url: str = "",
    with_web3: bool | None = None,
) -> str:
    """The lines a user pastes: each runs with what installing the package installed
    (curl aside); the web3.py one only where web3 is importable."""
    if with_web3 is None:
        with_web3 = importlib.util.find_spec("web3") is not None
    body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    lines = [
        "",
        "rpc-gateway demo: embedded Redis, mock nodes for "
        + ", ".join(f"{n.name} (chain {n.chain_id})" for n in networks)
        + ".",
        f"Demo account: {DEMO_EMAIL} / {DEMO_PASSWORD}   dashboard: {base}/dashboard",
        f"Demo API key: {key}",
        "",
        "Try:",
        f"  export RPC_KEY={key}",
    ]
    for net in networks:
        lines.append(
            f"  curl -s -X POST {base}{net.prefix}/$RPC_KEY "
            f"-H 'Content-Type: application/json' -d '{body}'"
        )
        lines.append(
            f'  curl -s -X POST {base}{net.prefix} -H "Authorization: Bearer $RPC_KEY" '
            f"-H 'Content-Type: application/json' -d '{body}'"
        )
    ws = "ws" + base[len("http") :]
    sub = '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}'
    first = networks[0].prefix if networks else "/bsc"
    python = _python()
    lines += [
        "",
        "WebSocket (new blocks as they come; Ctrl-C stops it):",
        f"  {python} -m gateway.demo.wscat \"{ws}{first}/$RPC_KEY\" '{sub}'",
    ]
    if with_web3:  # web3.py is not a dependency: only where it is installed
        lines += [
            f"  {python} - <<'EOF'",
            "import asyncio, os",
            "from web3 import AsyncWeb3, WebSocketProvider",
            "async def main():",
            f"    url = '{ws}{first}/' + os.environ['RPC_KEY']",
            "    async with AsyncWeb3(WebSocketProvider(url)) as w3:",
            "        await w3.eth.subscribe('newHeads')",
            "        async for msg in w3.socket.process_subscriptions():",
            "            print(int(msg['result']['number']))",
            "asyncio.run(main())",
            "EOF",
        ]
    if redis_url:  # the demo's Redis lives in a temp folder: the CLI needs its address
        lines += [
            "",
            "Operator CLI, in another terminal (the demo's Redis is embedded):",
            f"  export GATEWAY_REDIS_URL={redis_url}",
            f"  gateway keys list --account {DEMO_EMAIL}",
            "  gateway usage KEY_ID --since 1h",
        ]
    lines += ["", "Requests are not logged here; see them in the dashboard.", ""]
    lines += ["Ctrl-C stops everything.", ""]
    return "\n".join(lines)
