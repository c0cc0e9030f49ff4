"""The params of the transaction methods, read as a node reads them; refusals as ``CallError``.

``raw_param`` is geth's reading of ``eth_sendRawTransaction``'s one
argument (and of BSC's ``eth_sendRawTransactionConditional``, whose second
argument holds the conditions); ``private_param`` reads
``eth_sendPrivateTransaction``'s ``{tx, maxBlockNumber, preferences}``;
``bundle_param`` reads the builders' ``eth_sendBundle`` object (``txs``,
``maxBlockNumber``, ``minTimestamp``, ``maxTimestamp``,
``revertingTxHashes``). Objects are read the way a Go server does (member
names folded, the last one wins, unknown members dropped) and rebuilt, so
only what was checked is forwarded.

Bounds, before any decoding is paid for: a raw transaction over the
network's ``tx_max_bytes`` (geth's 128 KiB; a blob transaction's blobs
aside, as geth's blob pool counts them apart) answers geth's ``oversized
data``; a bundle of more than ``tx_bundle_max`` transactions is refused
whole. A bundle's transactions are decoded one at a time with a yield to
the event loop between them (``decode_all``), so a bundle never holds the
loop longer than one raw transaction does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from gateway.rpc.localmethods import CallError
from gateway.rpc.params import go_fold
from gateway.tx.codec import DecodedTx, TxError, decode_raw_tx, parse_hex

INVALID_PARAMS: Final = -32602
TX_REFUSED: Final = -32000  # geth's code for a transaction it will not take
OVERSIZED: Final = "oversized data"  # geth's txpool.ErrOversizedData
BLOB_TX: Final = 3

_BUNDLE_FIELDS: Final = (
    "txs",
    "maxBlockNumber",
    "minTimestamp",
    "maxTimestamp",
    "revertingTxHashes",
)
_CONDITION_FIELDS: Final = (
    "knownAccounts",
    "blockNumberMin",
    "blockNumberMax",
    "timestampMin",
    "timestampMax",
)
_PRIVATE_FIELDS: Final = ("tx", "maxBlockNumber", "preferences")


def _folded(obj: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """``obj``'s members that set one of ``fields`` (Go's folding; the last one wins)."""
    names = {go_fold(n): n for n in fields}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = names.get(go_fold(key))
        if name is not None:
            out[name] = value
    return {k: v for k, v in out.items() if v is not None}


def _args(params: Any, most: int = 1) -> list[Any]:
    if params is None or (isinstance(params, list) and not params):
        raise CallError(INVALID_PARAMS, "missing value for required argument 0")
    if not isinstance(params, list):
        raise CallError(INVALID_PARAMS, "non-array args")
    if len(params) > most:
        raise CallError(INVALID_PARAMS, f"too many arguments, want at most {most}")
    return params


def decode_checked(
    text: Any, chain_id: int, max_bytes: int, where: str = "invalid argument 0: "
) -> tuple[str, DecodedTx]:
    """One raw transaction as hex text: its canonical hex and what it holds."""
    try:
        raw = parse_hex(text)
    except TypeError as exc:
        raise CallError(INVALID_PARAMS, f"{where}{exc}") from None
    if len(raw) > max_bytes and raw[:1] != bytes([BLOB_TX]):
        raise CallError(TX_REFUSED, OVERSIZED)
    try:
        tx = decode_raw_tx(raw, chain_id)
    except TxError as exc:
        raise CallError(TX_REFUSED, str(exc)) from None
    if tx.size > max_bytes:  # a blob transaction's body, its blobs aside
        raise CallError(TX_REFUSED, OVERSIZED)
    return "0x" + raw.hex(), tx


def raw_param(params: Any, chain_id: int, max_bytes: int) -> tuple[str, DecodedTx]:
    """``eth_sendRawTransaction``'s argument, checked."""
    return decode_checked(_args(params)[0], chain_id, max_bytes)


def conditional_param(
    params: Any, chain_id: int, max_bytes: int
) -> tuple[str, DecodedTx, dict[str, Any]]:
    """``eth_sendRawTransactionConditional``'s transaction and its conditions (rebuilt)."""
    args = _args(params, 2)
    raw_hex, tx = decode_checked(args[0], chain_id, max_bytes)
    opts = args[1] if len(args) > 1 else {}
    if not isinstance(opts, dict):
        raise CallError(INVALID_PARAMS, "invalid argument 1: expected an options object")
    return raw_hex, tx, _folded(opts, _CONDITION_FIELDS)


def private_param(
    params: Any, chain_id: int, max_bytes: int
) -> tuple[str, DecodedTx, dict[str, Any]]:
    """``eth_sendPrivateTransaction``'s ``{tx, maxBlockNumber, preferences}``, checked."""
    obj = _args(params)[0]
    if not isinstance(obj, dict):
        raise CallError(INVALID_PARAMS, "invalid argument 0: expected an object")
    fields = _folded(obj, _PRIVATE_FIELDS)
    if "tx" not in fields:
        raise CallError(INVALID_PARAMS, "invalid argument 0: missing tx")
    raw_hex, tx = decode_checked(fields["tx"], chain_id, max_bytes, "invalid argument 0: tx: ")
    fields["tx"] = raw_hex
    _number(fields, "maxBlockNumber")
    return raw_hex, tx, fields


def bundle_param(params: Any, max_txs: int) -> dict[str, Any]:
    """``eth_sendBundle``'s object, its shape checked; ``txs`` still to decode (``decode_all``)."""
    obj = _args(params)[0]
    if not isinstance(obj, dict):
        raise CallError(INVALID_PARAMS, "invalid argument 0: expected a bundle object")
    bundle = _folded(obj, _BUNDLE_FIELDS)
    txs = bundle.get("txs")
    if not isinstance(txs, list) or not txs:
        raise CallError(INVALID_PARAMS, "invalid argument 0: bundle has no txs")
    if len(txs) > max_txs:
        raise CallError(
            INVALID_PARAMS,
            f"invalid argument 0: bundle holds {len(txs)} transactions, "
            f"at most {max_txs} are taken",
        )
    for name in ("maxBlockNumber", "minTimestamp", "maxTimestamp"):
        _number(bundle, name)
    reverting = bundle.get("revertingTxHashes")
    if reverting is not None and not (
        isinstance(reverting, list) and all(isinstance(h, str) for h in reverting)
    ):
        raise CallError(INVALID_PARAMS, "invalid argument 0: revertingTxHashes: expected hashes")
    return bundle


async def decode_all(
    texts: Sequence[Any], chain_id: int, max_bytes: int
) -> tuple[list[str], list[DecodedTx]]:
    """A bundle's transactions decoded in order, yielding to the loop between two."""
    hexes: list[str] = []
    decoded: list[DecodedTx] = []
    for i, text in enumerate(texts):
        if i:
            await asyncio.sleep(0)  # other calls run between two transactions
        hex_text, tx = decode_checked(text, chain_id, max_bytes, f"invalid argument 0: txs[{i}]: ")
        hexes.append(hex_text)
        decoded.append(tx)
    return hexes, decoded


def _number(obj: dict[str, Any], name: str) -> None:
    value = obj.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | str)):
        raise CallError(INVALID_PARAMS, f"invalid argument 0: {name}: expected a number")


def invalid(exc: CallError) -> bool:
    """Whether a refusal is of the transaction itself (counted as ``invalid``)."""
    return exc.code in (INVALID_PARAMS, TX_REFUSED)
