"""The params of the transaction methods, read as a node reads them; refusals as ``CallError``.

``raw_param`` is geth's reading of ``eth_sendRawTransaction``'s one
argument; ``bundle_param`` reads the builders' ``eth_sendBundle`` object
(``txs``, ``maxBlockNumber``, ``minTimestamp``, ``maxTimestamp``,
``revertingTxHashes``) the way a Go builder does (member names folded,
the last one wins, unknown members dropped) and gives back the canonical
rebuild that is forwarded.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.rpc.localmethods import CallError
from gateway.rpc.params import go_fold
from gateway.tx.codec import DecodedTx, TxError, decode_raw_tx, parse_hex

INVALID_PARAMS: Final = -32602
TX_REFUSED: Final = -32000  # geth's code for a transaction it will not take

_BUNDLE_FIELDS: Final = (
    "txs",
    "maxBlockNumber",
    "minTimestamp",
    "maxTimestamp",
    "revertingTxHashes",
)
_FOLDED: Final = {go_fold(n): n for n in _BUNDLE_FIELDS}


def _one_arg(params: Any) -> Any:
    if params is None or (isinstance(params, list) and not params):
        raise CallError(INVALID_PARAMS, "missing value for required argument 0")
    if not isinstance(params, list):
        raise CallError(INVALID_PARAMS, "non-array args")
    if len(params) > 1:
        raise CallError(INVALID_PARAMS, "too many arguments, want at most 1")
    return params[0]


def decode_checked(
    text: Any, chain_id: int, where: str = "invalid argument 0: "
) -> tuple[str, DecodedTx]:
    """One raw transaction as hex text: its canonical hex and what it holds."""
    try:
        raw = parse_hex(text)
    except TypeError as exc:
        raise CallError(INVALID_PARAMS, f"{where}{exc}") from None
    try:
        return "0x" + raw.hex(), decode_raw_tx(raw, chain_id)
    except TxError as exc:
        raise CallError(TX_REFUSED, str(exc)) from None


def raw_param(params: Any, chain_id: int) -> tuple[str, DecodedTx]:
    """``eth_sendRawTransaction``'s argument, checked."""
    return decode_checked(_one_arg(params), chain_id)


def bundle_param(params: Any, chain_id: int) -> tuple[dict[str, Any], list[DecodedTx]]:
    """``eth_sendBundle``'s object, checked: its rebuild and its transactions in order."""
    obj = _one_arg(params)
    if not isinstance(obj, dict):
        raise CallError(INVALID_PARAMS, "invalid argument 0: expected a bundle object")
    bundle: dict[str, Any] = {}
    for key, value in obj.items():
        name = _FOLDED.get(go_fold(key))
        if name is not None:
            bundle[name] = value  # the last one wins, as in Go
    txs = bundle.get("txs")
    if not isinstance(txs, list) or not txs:
        raise CallError(INVALID_PARAMS, "invalid argument 0: bundle has no txs")
    decoded = []
    hexes = []
    for i, text in enumerate(txs):
        hex_text, tx = decode_checked(text, chain_id, f"invalid argument 0: txs[{i}]: ")
        hexes.append(hex_text)
        decoded.append(tx)
    bundle["txs"] = hexes
    for name in ("maxBlockNumber", "minTimestamp", "maxTimestamp"):
        value = bundle.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | str)):
            raise CallError(INVALID_PARAMS, f"invalid argument 0: {name}: expected a number")
    reverting = bundle.get("revertingTxHashes")
    if reverting is not None and not (
        isinstance(reverting, list) and all(isinstance(h, str) for h in reverting)
    ):
        raise CallError(INVALID_PARAMS, "invalid argument 0: revertingTxHashes: expected hashes")
    return {k: v for k, v in bundle.items() if v is not None}, decoded


def invalid(exc: CallError) -> bool:
    """Whether a refusal is of the transaction itself (counted as ``invalid``)."""
    return exc.code in (INVALID_PARAMS, TX_REFUSED)
