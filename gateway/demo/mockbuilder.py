"""A mock block builder / relay: the private route's endpoint for tests, the demo and bench.

It takes ``eth_sendRawTransaction`` and ``eth_sendBundle`` as the BSC
builders do (48 Club, BlockRazor, BlockSec: a transaction's hash, a
bundle's hash), records every call it got (``received``), and can be
made to fail: ``down`` answers HTTP 503, ``reject`` answers a JSON-RPC
error in a node's words. A transaction the chain refuses (a nonce already
used, one too high) is answered as a builder does, with the node's words
(``nonce too low``) in a JSON-RPC error, never an HTTP error.
Transactions are read with the gateway's own decoder (``tx.codec``), so a
builder never accepts bytes a node would refuse. With ``land`` set (the
demo), each accepted transaction is handed on, as a builder includes it in
its next block.

``dialect`` makes it one of BSC's builders as their docs give the request
shapes (``gateway/tx/dialects.py`` speaks them): ``"48club"`` checks a
bundle's ``48spSign`` against the SoulPoint address it is given
(``soulpoint``); ``"blockrazor"`` takes ``noMerge`` / ``positionFirst`` as
booleans only; ``"bloxroute"`` answers only ``bsc_private_tx`` and
``blxr_submit_bundle`` with their object params (hex without 0x,
``mev_builders``), and only with its ``Authorization`` header. A request
of the wrong shape is refused in words, as the real ones do.

It answers the gateway's generic status form too (``status_method``,
default ``eth_getTxStatus``; params ``[hash]``, alone or in a JSON-RPC
batch): ``{"status": "included", "blockNumber": ...}`` for a hash put in
``included`` (its own record, whatever the chain has yet), ``dropped``
for one in ``dropped``, ``pending`` for any other it accepted, ``null``
for one it never saw.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from eth_hash.auto import keccak
from eth_keys.main import KeyAPI

from gateway.demo import wallet
from gateway.demo.mockws import Chain
from gateway.tx.codec import TxError, decode_raw_tx, parse_hex

Land = Callable[[str], Any]  # raw transaction hex -> None or an awaitable; raises to refuse


class MockBuilder:
    """One builder endpoint on a free port; ``url`` once started."""

    def __init__(
        self,
        chain_id: int,
        land: Land | None = None,
        dialect: str = "plain",
        auth: str = "",
        soulpoint: str = "",
    ) -> None:
        self.chain_id = chain_id
        self.land = land
        self.dialect = dialect
        self.auth = auth  # bloxroute: the Authorization header it takes
        self.soulpoint = soulpoint.lower()  # 48club: the address 48spSign must recover to
        self.bundles: list[dict[str, Any]] = []  # the bundles accepted, as received
        self.received: list[tuple[str, Any]] = []
        self.taken: set[str] = set()  # hashes accepted (a resend answers the hash again)
        self.status_method = "eth_getTxStatus"
        self.included: dict[str, int] = {}  # its own record: hash -> the block that holds it
        self.dropped: set[str] = set()
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
        if isinstance(call, list) and call and all(self._is_status(c) for c in call):
            self.received.extend((self.status_method, c.get("params")) for c in call)
            if self.down:
                return web.Response(status=503, text="builder unavailable")
            return _json([self._status_answer(c) for c in call])
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
        if self.auth and request.headers.get("Authorization") != self.auth:
            return web.Response(status=401, text="missing or wrong Authorization header")
        if self._is_status(call):
            return _json(self._status_answer(call))
        try:
            result = await self._answer(str(method), call.get("params"))
        except wallet.NodeError as exc:  # the chain refused it ("nonce too low"): its words
            return _json({"jsonrpc": "2.0", "id": cid, "error": _error(exc.code, str(exc))})
        except (TxError, TypeError, ValueError, IndexError, KeyError) as exc:
            return _json({"jsonrpc": "2.0", "id": cid, "error": _error(-32000, str(exc))})
        return _json({"jsonrpc": "2.0", "id": cid, "result": result})

    def _is_status(self, call: Any) -> bool:
        return isinstance(call, dict) and call.get("method") == self.status_method

    def _status_answer(self, call: dict[str, Any]) -> dict[str, Any]:
        params = call.get("params")
        tx_hash = params[0].lower() if isinstance(params, list) and params else None
        result: dict[str, Any] | None = None
        if not isinstance(tx_hash, str):
            return {"jsonrpc": "2.0", "id": call.get("id"), "error": _error(-32602, "params")}
        if tx_hash in self.included:
            result = {"status": "included", "blockNumber": hex(self.included[tx_hash])}
        elif tx_hash in self.dropped:
            result = {"status": "dropped"}
        elif tx_hash in self.taken:
            result = {"status": "pending"}
        return {"jsonrpc": "2.0", "id": call.get("id"), "result": result}

    async def _answer(self, method: str, params: Any) -> Any:
        if self.dialect == "bloxroute":
            return await self._bloxroute(method, params)
        if method in ("eth_sendRawTransaction", "eth_sendRawTransactionConditional"):
            return await self._take(params[0])
        if method == "eth_sendBundle":
            bundle = params[0]
            self._check_bundle(bundle)
            return await self._bundle(bundle["txs"], bundle)
        raise ValueError(f"the method {method} does not exist/is not available")

    def _check_bundle(self, bundle: dict[str, Any]) -> None:
        if self.dialect == "48club" and self.soulpoint:
            sign = bundle.get("48spSign")
            if not isinstance(sign, str) or _signer(bundle["txs"], sign) != self.soulpoint:
                raise ValueError("invalid 48spSign")
        if self.dialect == "blockrazor":
            for name in ("noMerge", "positionFirst"):
                if name in bundle and not isinstance(bundle[name], bool):
                    raise ValueError(f"invalid {name}: expected a boolean")

    async def _bundle(self, raws: list[Any], bundle: dict[str, Any]) -> str:
        hashes = [await self._take(raw) for raw in raws]
        self.bundles.append(bundle)
        return "0x" + keccak(b"".join(bytes.fromhex(h[2:]) for h in hashes)).hex()

    async def _bloxroute(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict) or not isinstance(params.get("mev_builders"), list):
            raise ValueError("params must be an object with mev_builders")
        if method == "bsc_private_tx":
            raw = params.get("transaction")
            if not isinstance(raw, str) or raw.startswith("0x"):
                raise ValueError("transaction: expected hex without 0x")
            return {"txHash": (await self._take("0x" + raw))[2:]}
        if method == "blxr_submit_bundle":
            raws = params.get("transaction")
            if not isinstance(raws, list) or any(
                not isinstance(r, str) or r.startswith("0x") for r in raws
            ):
                raise ValueError("transaction: expected a list of hex without 0x")
            if "block_number" not in params:
                raise ValueError("block_number is required")
            return {"bundleHash": await self._bundle(["0x" + r for r in raws], params)}
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


def _signer(raws: list[Any], sign: str) -> str:
    """The address that signed a bundle's 48spSign (keccak256 of its hashes), or ""."""
    try:
        hashes = b"".join(keccak(parse_hex(raw)) for raw in raws)
        sig = bytes.fromhex(sign.removeprefix("0x"))
        vrs = (sig[64] - 27, int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big"))
        public = KeyAPI().Signature(vrs=vrs).recover_public_key_from_msg_hash(keccak(hashes))
    except Exception:  # any malformed signature recovers no one
        return ""
    return public.to_checksum_address().lower()


def _error(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


async def start_mock_builder(
    chain_id: int, land: Land | None = None, dialect: str = "plain", **kw: str
) -> MockBuilder:
    """A started builder for ``chain_id`` (``kw``: ``auth``, ``soulpoint``)."""
    return await MockBuilder(chain_id, land, dialect, **kw).start()


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
