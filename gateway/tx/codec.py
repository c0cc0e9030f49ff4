"""Read a signed transaction as a node does, before any node sees it.

``decode_raw_tx`` parses the bytes of ``eth_sendRawTransaction`` with the
``rlp`` library, hashes with ``eth-hash`` (Keccak-256) and recovers the
sender with ``eth-keys`` (its coincurve backend, secp256k1 in C, when
installed): no hand-written crypto or encoding. Every transaction type a
wallet sends today is read: legacy (with or without EIP-155), EIP-2930 (1),
EIP-1559 (2), blobs (3, the network form with its blobs, or the bare body)
and EIP-7702 set-code (4).

Refusals are ``TxError`` carrying geth's words, so a client library that
reads the message (ethers, viem) sees what a geth or BSC node would have
said: ``rlp: ...`` for bytes that are not a transaction, ``transaction type
not supported``, ``typed transaction too short``, ``invalid sender`` (with
geth's cause after a colon) for a signature that recovers no key or names
another chain. A legacy transaction without a chain id (pre-EIP-155) is
valid on every chain: it is not refused here, and each node applies its own
``allow-unprotected-txs`` rule.

I/O-free and imports nothing from the gateway: the mock nodes read
transactions with it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import rlp
from eth_hash.auto import keccak
from eth_keys.backends.coincurve import CoinCurveECCBackend
from eth_keys.main import KeyAPI
from rlp.exceptions import DecodingError, DeserializationError
from rlp.sedes import big_endian_int

__all__ = ["DecodedTx", "TxError", "contract_address", "decode_raw_tx", "parse_hex"]

_KEYS: Final = KeyAPI(CoinCurveECCBackend())  # secp256k1 in C (a declared dependency)
_SECP256K1_N: Final = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_HALF_N: Final = _SECP256K1_N // 2

# type -> (geth's Go type name for rlp messages, field count, chain id first?)
_TYPED: Final = {
    1: ("types.AccessListTx", 11),
    2: ("types.DynamicFeeTx", 12),
    3: ("types.BlobTx", 14),
    4: ("types.SetCodeTx", 13),
}
# where each typed body keeps nonce, gas, to, value, data (chain id is field 0)
_LAYOUT: Final = {1: (1, 3, 4, 5, 6), 2: (1, 4, 5, 6, 7), 3: (1, 4, 5, 6, 7), 4: (1, 4, 5, 6, 7)}


class TxError(ValueError):
    """Bytes a node would refuse; ``str()`` is the message in geth's words."""


@dataclass(frozen=True, slots=True)
class DecodedTx:
    """What the gateway (and a mock node) reads from a signed transaction."""

    hash: str  # 0x + 64 hex: what the node will answer and clients compute
    sender: str  # 0x + 40 lower-case hex
    type: int
    chain_id: int | None  # None: a legacy transaction signed without EIP-155
    nonce: int
    gas: int
    to: str | None  # None: contract creation
    value: int
    data: bytes
    gas_price: int | None  # legacy and type 1
    max_fee: int | None  # types 2-4
    max_priority_fee: int | None  # types 2-4
    v: int = 0  # legacy: v as signed (27/28 or EIP-155); typed: the y parity
    r: int = 0
    s: int = 0
    blobs: int = 0  # blobs carried (type 3 network form)
    size: int = 0  # bytes of the transaction without its blobs (what geth's size limit reads)


def parse_hex(text: object) -> bytes:
    """The bytes of a ``0x``-prefixed hex string parameter, as geth's ``hexutil.Bytes``.

    Raises ``TypeError`` with geth's words for what is not such a string
    (the caller answers -32602, as geth does for a malformed argument).
    """
    if not isinstance(text, str):
        raise TypeError("json: cannot unmarshal non-string into Go value of type hexutil.Bytes")
    if not text.startswith(("0x", "0X")):
        raise TypeError(
            "json: cannot unmarshal hex string without 0x prefix "
            "into Go value of type hexutil.Bytes"
        )
    body = text[2:]
    if len(body) % 2:
        raise TypeError(
            "json: cannot unmarshal hex string of odd length into Go value of type hexutil.Bytes"
        )
    try:
        return bytes.fromhex(body)
    except ValueError:
        raise TypeError(
            "json: cannot unmarshal invalid hex string into Go value of type hexutil.Bytes"
        ) from None


def decode_raw_tx(raw: bytes, chain_id: int | None = None) -> DecodedTx:
    """Decode ``raw``, check its signature (and chain, when ``chain_id`` is given).

    Raises ``TxError`` for anything a node refuses before looking at state.
    """
    if raw and raw[0] > 0x7F:
        return _legacy(raw, chain_id)
    if len(raw) <= 1:
        raise TxError("typed transaction too short")
    kind = raw[0]
    spec = _TYPED.get(kind)
    if spec is None:
        raise TxError("transaction type not supported")
    go_name, count = spec
    item = _rlp(raw[1:], go_name)
    blobs = 0
    body_bytes = raw[1:]
    if kind == 3 and isinstance(item, list) and item and isinstance(item[0], list):
        # The network form: [tx body, (wrapper version,) blobs, commitments, proofs].
        if len(item) not in (4, 5):
            raise TxError("rlp: expected 4 or 5 elements for types.blobTxWithBlobs")
        blob_list = item[-3]
        if not isinstance(blob_list, list):
            raise TxError("rlp: expected input list for []kzg4844.Blob")
        blobs = len(blob_list)
        body_bytes = rlp.encode(item[0])
        item = item[0]
    fields = _fields(item, count, go_name)
    ints = _ints(fields, kind)
    chain = ints[0]
    n_i, gas_i, to_i, value_i, data_i = _LAYOUT[kind]
    to = _to(fields[to_i], go_name)
    if to is None and kind in (3, 4):
        raise TxError(
            f"rlp: input string too short for common.Address, decoding into ({go_name}).To"
        )
    parity, r, s = ints[-3], ints[-2], ints[-1]
    digest = keccak(bytes([kind]) + rlp.encode(fields[:-3]))
    sender = _recover(digest, parity, r, s, parity > 1)
    if chain_id is not None and chain != chain_id:
        raise TxError(f"invalid sender: invalid chain id for signer: have {chain} want {chain_id}")
    return DecodedTx(
        hash="0x" + keccak(bytes([kind]) + body_bytes).hex(),
        sender=sender,
        type=kind,
        chain_id=chain,
        nonce=ints[n_i],
        gas=ints[gas_i],
        to=to,
        value=ints[value_i],
        data=_bytes(fields[data_i]),
        gas_price=ints[2] if kind == 1 else None,
        max_fee=ints[3] if kind != 1 else None,
        max_priority_fee=ints[2] if kind != 1 else None,
        v=parity,
        r=r,
        s=s,
        blobs=blobs,
        size=1 + len(body_bytes),
    )


def _legacy(raw: bytes, chain_id: int | None) -> DecodedTx:
    go_name = "types.LegacyTx"
    fields = _fields(_rlp(raw, go_name), 9, go_name)
    ints = [_int(fields[i], go_name) if i not in (3, 5) else 0 for i in range(9)]
    v, r, s = ints[6], ints[7], ints[8]
    chain: int | None
    if v in (27, 28):
        chain, parity, signed = None, v - 27, fields[:6]
    elif v >= 35:
        chain, parity = (v - 35) // 2, (v - 35) % 2
        signed = [*fields[:6], big_endian_int.serialize(chain), b"", b""]
    else:
        raise TxError("invalid sender: invalid transaction v, r, s values")
    sender = _recover(keccak(rlp.encode(signed)), parity, r, s, False)
    if chain_id is not None and chain is not None and chain != chain_id:
        raise TxError(f"invalid sender: invalid chain id for signer: have {chain} want {chain_id}")
    return DecodedTx(
        hash="0x" + keccak(raw).hex(),
        sender=sender,
        type=0,
        chain_id=chain,
        nonce=ints[0],
        gas=ints[2],
        to=_to(fields[3], go_name),
        value=ints[4],
        data=_bytes(fields[5]),
        gas_price=ints[1],
        max_fee=None,
        max_priority_fee=None,
        v=v,
        r=r,
        s=s,
        size=len(raw),
    )


def _rlp(data: bytes, go_name: str) -> object:
    try:
        return rlp.decode(data, strict=True)
    except DecodingError as exc:
        reason = str(exc)
        extra = re.search(r"ends with (-?\d+) superfluous", reason)
        if extra is not None and int(extra.group(1)) > 0:
            raise TxError("rlp: input contains more than one value") from None
        raise TxError(f"rlp: {_rlp_words(reason)} for {go_name}") from None


def _rlp_words(reason: str) -> str:
    """geth's rlp package words for the rlp library's reasons (the common ones)."""
    low = reason.lower()
    if "too short" in low or "superfluous" in low or "no data" in low:
        return "value size exceeds available input length"
    if "prefix" in low or "non-canonical" in low or "minimal" in low:
        return "non-canonical size information"
    return low.rstrip(".")


def _fields(item: object, count: int, go_name: str) -> list[object]:
    if not isinstance(item, list):
        raise TxError(f"rlp: expected input list for {go_name}")
    if len(item) < count:
        raise TxError(f"rlp: too few elements for {go_name}")
    if len(item) > count:
        raise TxError(f"rlp: input list has too many elements for {go_name}")
    return item


def _int(value: object, go_name: str) -> int:
    if not isinstance(value, bytes):
        raise TxError(f"rlp: expected input string or byte for *big.Int, decoding into ({go_name})")
    try:
        return int(big_endian_int.deserialize(value))
    except DeserializationError:
        raise TxError(
            "rlp: non-canonical integer (leading zero bytes) for *big.Int, "
            f"decoding into ({go_name})"
        ) from None


def _ints(fields: list[object], kind: int) -> list[int]:
    """Each integer field of a typed body (lists and byte strings read as 0)."""
    go_name = _TYPED[kind][0]
    to_i, data_i = _LAYOUT[kind][2], _LAYOUT[kind][4]
    skip = {to_i, data_i, data_i + 1}  # to, data, access list
    if kind == 3:
        skip.add(10)  # blob versioned hashes
    if kind == 4:
        skip.add(9)  # authorization list
    return [0 if i in skip else _int(f, go_name) for i, f in enumerate(fields)]


def _bytes(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TxError("rlp: expected input string or byte for []uint8")
    return value


def _to(value: object, go_name: str) -> str | None:
    raw = _bytes(value)
    if not raw:
        return None
    if len(raw) != 20:
        raise TxError(
            f"rlp: input string too {'short' if len(raw) < 20 else 'long'} for "
            f"common.Address, decoding into ({go_name}).To"
        )
    return "0x" + raw.hex()


def _recover(digest: bytes, parity: int, r: int, s: int, bad_parity: bool) -> str:
    """The sender's address; geth's words when the values recover no key."""
    if bad_parity or not (0 < r < _SECP256K1_N and 0 < s <= _HALF_N) or parity not in (0, 1):
        raise TxError("invalid sender: invalid transaction v, r, s values")
    try:
        signature = _KEYS.Signature(vrs=(parity, r, s))
        public = signature.recover_public_key_from_msg_hash(digest)
    except Exception:  # eth-keys' BadSignature / ValidationError: no key recovers
        raise TxError("invalid sender") from None
    return "0x" + keccak(public.to_bytes())[-20:].hex()


def contract_address(sender: str, nonce: int) -> str:
    """Where a contract created by ``sender`` at ``nonce`` lives (for the mock nodes)."""
    return "0x" + keccak(rlp.encode([bytes.fromhex(sender[2:]), nonce]))[-20:].hex()
