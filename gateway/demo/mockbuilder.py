"""A mock block builder / relay: the private route's endpoint for tests, the demo and bench.

It takes ``eth_sendRawTransaction`` and ``eth_sendBundle`` as the BSC
builders do (48 Club, BlockRazor, BlockSec: a transaction's hash, a
bundle's hash), records every call it got (``received``), and can be
made to fail: ``down`` answers HTTP 503, ``reject`` answers a JSON-RPC
error in a node's words. A transaction the chain refuses (a nonce already
used, one too high) is answered as a builder does, with the node's words
(``nonce too low``) in a JSON-RPC error, never an HTTP error.
Transactions are read with the gateway's own decoder (``tx.codec``), so
a builder never accepts bytes a node would refuse. With ``land`` set (the
demo), each accepted transaction is handed on, as a builder includes it in
its next block.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from eth_hash.auto import keccak

from gateway.demo import wallet
from gateway.demo.mockws import Chain
from gateway.tx.codec import TxError, decode_raw_tx, parse_hex

Land = Callable[[str], Any]  # raw transaction hex -> None or an awaitable; raises to refuse


class MockBuilder:
    """One builder endpoint on a free port; ``url`` once started."""

    def __init__(self, chain_id: int, land: Land | None = None) -> None:
        self.chain_id = chain_id
        self.land = land
        self.received: list[tuple[str, Any]] = []
        self.taken: set[str] = set()  # hashes accepted (a resend answers the hash again)
        self.down = False
        self.reject: str | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    def methods(self) -> list[str]:
        return [method for method, _ in self.received]

    async def start(self, host: str = "127.0.0.1") -> MockBuilder:
        app = web.Application()
        app.router.add_post("/", self._handle)
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{host}:{port}/"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            call = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _json({"jsonrpc": "2.0", "id": None, "error": _error(-32700, "parse error")})
        if not isinstance(call, dict):  # builders take one call a request
            self.received.append(("None", None))
            error = _error(-32600, "invalid request: one JSON-RPC call object expected")
            return _json({"jsonrpc": "2.0", "id": None, "error": error})
        method = call.get("method")
        self.received.append((str(method), call.get("params")))
        if self.down:
            return web.Response(status=503, text="builder unavailable")
        cid = call.get("id")
        if self.reject is not None:
            return _json({"jsonrpc": "2.0", "id": cid, "error": _error(-32000, self.reject)})
        try:
            result = await self._answer(str(method), call.get("params"))
        except wallet.NodeError as exc:  # the chain refused it ("nonce too low"): its words
            return _json({"jsonrpc": "2.0", "id": cid, "error": _error(exc.code, str(exc))})
        except (TxError, TypeError, ValueError, IndexError, KeyError) as exc:
            return _json({"jsonrpc": "2.0", "id": cid, "error": _error(-32000, str(exc))})
        return _json({"jsonrpc": "2.0", "id": cid, "result": result})

    async def _answer(self, method: str, params: Any) -> Any:
        if method == "eth_sendRawTransaction":
            return await self._take(params[0])
        if method == "eth_sendBundle":
            hashes = [await self._take(raw) for raw in params[0]["txs"]]
            return "0x" + keccak(b"".join(bytes.fromhex(h[2:]) for h in hashes)).hex()
        raise ValueError(f"the method {method} does not exist/is not available")

    async def _take(self, raw: Any) -> str:
        tx = decode_raw_tx(parse_hex(raw), self.chain_id)
        if tx.hash in self.taken:
            return tx.hash
        if self.land is not None:
            landed = self.land(raw)
            if inspect.isawaitable(landed):
                await landed
        self.taken.add(tx.hash)
        return tx.hash


def _error(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


async def start_mock_builder(chain_id: int, land: Land | None = None) -> MockBuilder:
    """A started builder for ``chain_id``."""
    return await MockBuilder(chain_id, land).start()


def lands_on(chain: Chain) -> Land:
    """What the demo's builder does with a transaction: put it in ``chain``'s next block.

    As the chain's own nodes do with a sent transaction (mined when the block
    is due, or at once on a chain without a block timer), so a wallet on the
    private route sees its receipt as quickly as on the public one.
    """

    def land(raw: str) -> None:
        wallet.answer(
            "eth_sendRawTransaction",
            [raw],
            ledger=chain.ledger,
            head=chain.head,
            block_hash=chain.block_hash,
            include_at=chain.next_block(),
        )
        chain.include()

    return land
