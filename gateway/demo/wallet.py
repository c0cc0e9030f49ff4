"""What a wallet or a dapp library asks a node in its first minute, answered for the demo nodes.

web3.py's ``is_connected()`` asks ``web3_clientVersion``; ethers' and viem's
first transaction asks for the nonce (``eth_getTransactionCount`` with
``pending``), fees (``eth_gasPrice``, ``eth_maxPriorityFeePerGas``,
``eth_feeHistory``, the latest block's ``baseFeePerGas``), ``eth_estimateGas``,
then sends the signed bytes and polls for the receipt. A mock node that
answers any of these with "method not found" makes the demo look broken,
so every demo node (``mocknode``, ``chainnode``, ``mockws``)
answers them all from here.

Signed transactions are really read (``gateway.tx.codec``, the gateway's own
decoder): the hash is the one the client computed, the sender is recovered
from the signature, a nonce below the sender's count is refused ("nonce too
low", as geth words it), and the transaction is kept in a ``Ledger`` shared
by every node of one chain, with a receipt in the block it was put in. Bytes
that are not a signed transaction keep the old stand-in answer (a hash of the
bytes), which node-level forwarding tests rely on; only real transactions
touch the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from eth_hash.auto import keccak

from gateway.tx.codec import DecodedTx, contract_address, decode_raw_tx

__all__ = ["CLIENT_VERSION", "Ledger", "NodeError", "answer", "not_offered", "offers"]

CLIENT_VERSION: Final = "rpc-gateway-demo-node/1.0"
GAS_PRICE: Final = 1_000_000_000  # 1 gwei, BSC's usual price
PRIORITY_FEE: Final = GAS_PRICE  # base fee is 0 on these chains: the tip is the price
_TRANSFER_GAS: Final = 21_000
_EMPTY_BLOOM: Final = "0x" + "00" * 256
_MAX_FEE_HISTORY: Final = 1024  # geth's cap on blockCount


class NodeError(Exception):
    """A JSON-RPC error a real node would answer (code and message as geth's)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class _Mined:
    tx: DecodedTx
    block: int
    index: int


class Ledger:
    """Sent transactions and nonces of one chain; every node of the chain shares it."""

    def __init__(self, chain_id: int) -> None:
        self.chain_id = chain_id
        self._nonces: dict[str, int] = {}
        self._txs: dict[str, _Mined] = {}
        self._blocks: dict[int, list[str]] = {}

    def nonce(self, address: str) -> int:
        return self._nonces.get(address.lower(), 0)

    def add(self, tx: DecodedTx, block: int) -> None:
        """Put ``tx`` in ``block``; NodeError for what a node would refuse."""
        if tx.chain_id is not None and tx.chain_id != self.chain_id:
            raise NodeError(-32000, f"invalid chain id {tx.chain_id}, want {self.chain_id}")
        expected = self.nonce(tx.sender)
        if tx.hash in self._txs:
            raise NodeError(-32000, "already known")
        if tx.nonce < expected:
            raise NodeError(-32000, f"nonce too low: next nonce {expected}, tx nonce {tx.nonce}")
        if tx.nonce > expected:  # geth would queue it; the demo has no queue
            raise NodeError(-32000, f"nonce too high: next nonce {expected}, tx nonce {tx.nonce}")
        in_block = self._blocks.setdefault(block, [])
        self._txs[tx.hash] = _Mined(tx, block, len(in_block))
        in_block.append(tx.hash)
        self._nonces[tx.sender.lower()] = expected + 1

    def find(self, tx_hash: Any) -> _Mined | None:
        return self._txs.get(tx_hash.lower()) if isinstance(tx_hash, str) else None

    def hashes_in(self, block: int) -> list[str]:
        return list(self._blocks.get(block, ()))


BlockHash = Callable[[int], str]


def offers(method: str) -> bool:
    return method in _METHODS


def not_offered(method: str) -> str:
    """geth's wording, which ethers matches to fall back (ENVIRONMENT.md)."""
    return f"the method {method[:64]} does not exist/is not available"


def answer(
    method: str,
    params: list[Any],
    *,
    ledger: Ledger,
    head: int,
    block_hash: BlockHash,
    include_at: int | None = None,
) -> Any:
    """The result for one of the wallet methods (``offers(method)``).

    Raises NodeError for what a node refuses, ValueError/TypeError/IndexError
    for malformed params (the caller answers -32602).

    ``include_at`` is the block a sent transaction goes into (default: the
    head, as an automining dev chain does); the caller mines it if needed.
    """
    return _METHODS[method](_Ctx(ledger, head, block_hash, include_at), params)


@dataclass(frozen=True, slots=True)
class _Ctx:
    ledger: Ledger
    head: int
    block_hash: BlockHash
    include_at: int | None


def _hex(n: int) -> str:
    return hex(n)


def _block_param(ctx: _Ctx, params: list[Any], index: int) -> int:
    tag = params[index] if len(params) > index else "latest"
    if isinstance(tag, dict):  # EIP-1898 {"blockNumber": ...} / {"blockHash": ...}
        tag = tag.get("blockNumber", "latest")
    if tag in ("latest", "pending", "safe", "finalized"):
        return ctx.head
    if tag == "earliest":
        return 0
    if isinstance(tag, str) and tag.startswith("0x"):
        number = int(tag, 16)
        if number > ctx.head:
            raise NodeError(-32000, "header not found")
        return number
    raise ValueError("bad block tag")


def _address_param(params: list[Any]) -> str:
    address = params[0]
    if not isinstance(address, str) or len(address) != 42 or not address.startswith("0x"):
        raise ValueError("not an address")
    int(address[2:], 16)
    return address


def _transaction_count(ctx: _Ctx, params: list[Any]) -> str:
    address = _address_param(params)
    _block_param(ctx, params, 1)
    return _hex(ctx.ledger.nonce(address))


def _code(ctx: _Ctx, params: list[Any]) -> str:
    _address_param(params)
    _block_param(ctx, params, 1)
    return "0x"  # every demo account is a plain account


def _estimate_gas(ctx: _Ctx, params: list[Any]) -> str:
    call = params[0] if params else None
    if not isinstance(call, dict):
        raise ValueError("call must be an object")
    data = call.get("data") or call.get("input") or "0x"
    if not isinstance(data, str) or not data.startswith("0x"):
        raise ValueError("data must be 0x-hex")
    payload = bytes.fromhex(data[2:])
    cost = sum(4 if b == 0 else 16 for b in payload)  # calldata gas, as the yellow paper
    extra = 32_000 if not call.get("to") else (25_000 if payload else 0)
    return _hex(_TRANSFER_GAS + cost + extra)


def _fee_history(ctx: _Ctx, params: list[Any]) -> dict[str, Any]:
    count = params[0]
    count = int(count, 16) if isinstance(count, str) else int(count)
    if count < 1:
        raise ValueError("blockCount must be at least 1")
    newest = _block_param(ctx, params, 1)
    count = min(count, _MAX_FEE_HISTORY, newest + 1)
    percentiles = params[2] if len(params) > 2 and params[2] is not None else []
    if not isinstance(percentiles, list) or sorted(percentiles) != percentiles:
        raise ValueError("rewardPercentiles must be an increasing list")
    history: dict[str, Any] = {
        "oldestBlock": _hex(newest - count + 1),
        "baseFeePerGas": ["0x0"] * (count + 1),
        "gasUsedRatio": [0.0] * count,
    }
    if percentiles:
        history["reward"] = [[_hex(PRIORITY_FEE)] * len(percentiles) for _ in range(count)]
    return history


def _send_raw(ctx: _Ctx, params: list[Any]) -> str:
    raw = params[0]
    if not isinstance(raw, str) or not raw.startswith("0x"):
        raise ValueError("raw transaction must be 0x-hex")
    try:
        tx = decode_raw_tx(bytes.fromhex(raw[2:]))
    except ValueError:
        return "0x" + keccak(raw.encode()).hex()  # not a transaction: a stand-in hash
    ctx.ledger.add(tx, ctx.head if ctx.include_at is None else ctx.include_at)
    return tx.hash


def _tx_object(ctx: _Ctx, mined: _Mined) -> dict[str, Any]:
    tx = mined.tx
    out: dict[str, Any] = {
        "hash": tx.hash,
        "type": _hex(tx.type),
        "nonce": _hex(tx.nonce),
        "blockHash": ctx.block_hash(mined.block),
        "blockNumber": _hex(mined.block),
        "transactionIndex": _hex(mined.index),
        "from": tx.sender,
        "to": tx.to,
        "value": _hex(tx.value),
        "gas": _hex(tx.gas),
        "input": "0x" + tx.data.hex(),
        "v": _hex(tx.v),
        "r": _hex(tx.r),
        "s": _hex(tx.s),
    }
    if tx.chain_id is not None:
        out["chainId"] = _hex(tx.chain_id)
    if tx.type == 2:
        assert tx.max_fee is not None and tx.max_priority_fee is not None
        out |= {
            "maxFeePerGas": _hex(tx.max_fee),
            "maxPriorityFeePerGas": _hex(tx.max_priority_fee),
            "gasPrice": _hex(min(tx.max_fee, tx.max_priority_fee)),  # base fee 0
        }
    else:
        out["gasPrice"] = _hex(tx.gas_price or 0)
    if tx.type:
        out |= {"accessList": [], "yParity": _hex(tx.v)}
    return out


def _tx_by_hash(ctx: _Ctx, params: list[Any]) -> dict[str, Any] | None:
    mined = ctx.ledger.find(params[0])
    if mined is None or mined.block > ctx.head:
        return None
    return _tx_object(ctx, mined)


def _receipt(ctx: _Ctx, params: list[Any]) -> dict[str, Any] | None:
    mined = ctx.ledger.find(params[0])
    if mined is None or mined.block > ctx.head:
        return None
    tx = mined.tx
    price = tx.gas_price if tx.type != 2 else min(tx.max_fee or 0, tx.max_priority_fee or 0)
    used = int(_estimate_gas(ctx, [{"to": tx.to, "data": "0x" + tx.data.hex()}]), 16)
    earlier = ctx.ledger.hashes_in(mined.block)[: mined.index + 1]
    return {
        "transactionHash": tx.hash,
        "transactionIndex": _hex(mined.index),
        "blockHash": ctx.block_hash(mined.block),
        "blockNumber": _hex(mined.block),
        "from": tx.sender,
        "to": tx.to,
        "contractAddress": None if tx.to else contract_address(tx.sender, tx.nonce),
        "cumulativeGasUsed": _hex(used * len(earlier)),
        "gasUsed": _hex(used),
        "effectiveGasPrice": _hex(price or 0),
        "logs": [],
        "logsBloom": _EMPTY_BLOOM,
        "status": "0x1",
        "type": _hex(tx.type),
    }


_Method = Callable[[_Ctx, list[Any]], Any]
_METHODS: Final[dict[str, _Method]] = {
    "web3_clientVersion": lambda ctx, p: f"{CLIENT_VERSION}/chain-{ctx.ledger.chain_id}",
    "net_listening": lambda ctx, p: True,
    "net_peerCount": lambda ctx, p: "0x19",
    "eth_syncing": lambda ctx, p: False,
    "eth_accounts": lambda ctx, p: [],  # a node holds no keys for the public
    "eth_getTransactionCount": _transaction_count,
    "eth_getCode": _code,
    "eth_gasPrice": lambda ctx, p: _hex(GAS_PRICE),
    "eth_maxPriorityFeePerGas": lambda ctx, p: _hex(PRIORITY_FEE),
    "eth_feeHistory": _fee_history,
    "eth_estimateGas": _estimate_gas,
    "eth_sendRawTransaction": _send_raw,
    "eth_getTransactionByHash": _tx_by_hash,
    "eth_getTransactionReceipt": _receipt,
}
