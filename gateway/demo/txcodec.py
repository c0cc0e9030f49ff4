"""Reading a signed Ethereum transaction without a crypto library: Keccak-256, RLP, ecrecover.

The demo nodes must accept what web3.py, ethers and viem sign and send
(``eth_sendRawTransaction``), answer with the hash those libraries compute
themselves (ethers refuses a hash that differs), and credit the nonce to the
sender. That takes Keccak-256 (not the standard SHA3-256: different
padding), RLP and secp256k1 public-key recovery. The gateway's runtime
dependencies have none of them, and a demo that must run offline from
``pip install .`` cannot pull them in, so they are written out here in plain
Python from their specifications (FIPS 202's Keccak-f[1600]; the yellow
paper's RLP; SEC 1 §4.1.6 recovery). Slow (milliseconds per transaction)
and never on the gateway's path: only the mock nodes use it.

It stays whole because Keccak-256, RLP and ecrecover serve one function
(``decode_raw_tx``), are written from their specifications and never change,
and only the mock nodes import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DecodedTx", "decode_raw_tx", "keccak256", "rlp_decode", "rlp_encode"]

# -- Keccak-256 -------------------------------------------------------------------------

_MASK: Final = (1 << 64) - 1
_RATE: Final = 136  # bytes: 1600 - 2 * 256 bits of capacity


def _round_constants() -> tuple[int, ...]:
    """The 24 iota constants, from the spec's LFSR rather than typed out."""

    def bit(t: int) -> int:
        r = 1
        for _ in range(t % 255):
            r <<= 1
            if r & 0x100:
                r ^= 0x171
        return r & 1

    return tuple(sum(bit(j + 7 * rnd) << ((1 << j) - 1) for j in range(7)) for rnd in range(24))


def _rotations() -> tuple[int, ...]:
    """Rho offsets by lane index x + 5y, from the spec's walk over (x, y)."""
    rot = [0] * 25
    x, y = 1, 0
    for t in range(24):
        rot[x + 5 * y] = ((t + 1) * (t + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    return tuple(rot)


_RC: Final = _round_constants()
_ROT: Final = _rotations()


def _rol1(lane: int) -> int:
    return ((lane << 1) | (lane >> 63)) & _MASK


def _permute(a: list[int]) -> list[int]:
    for rc in _RC:
        c = [a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20] for x in range(5)]
        d = [c[(x - 1) % 5] ^ _rol1(c[(x + 1) % 5]) for x in range(5)]
        a = [a[i] ^ d[i % 5] for i in range(25)]
        b = [0] * 25
        for x in range(5):
            for y in range(5):
                lane, r = a[x + 5 * y], _ROT[x + 5 * y]
                b[y + 5 * ((2 * x + 3 * y) % 5)] = ((lane << r) | (lane >> (64 - r))) & _MASK
        a = [
            b[i] ^ (~b[(i + 1) % 5 + 5 * (i // 5)] & b[(i + 2) % 5 + 5 * (i // 5)] & _MASK)
            for i in range(25)
        ]
        a[0] ^= rc
    return a


def keccak256(data: bytes) -> bytes:
    """Ethereum's hash (original Keccak padding 0x01 ... 0x80)."""
    padded = bytearray(data)
    padded.append(0x01)
    padded.extend(b"\x00" * (-len(padded) % _RATE))
    padded[-1] |= 0x80
    state = [0] * 25
    for start in range(0, len(padded), _RATE):
        block = padded[start : start + _RATE]
        for i in range(_RATE // 8):
            state[i] ^= int.from_bytes(block[8 * i : 8 * i + 8], "little")
        state = _permute(state)
    return b"".join(state[i].to_bytes(8, "little") for i in range(4))


# -- RLP --------------------------------------------------------------------------------

RlpItem = bytes | list["RlpItem"]


def rlp_encode(item: RlpItem) -> bytes:
    if isinstance(item, list):
        body = b"".join(rlp_encode(i) for i in item)
        return _length(len(body), 0xC0) + body
    if len(item) == 1 and item[0] < 0x80:
        return item
    return _length(len(item), 0x80) + item


def _length(n: int, offset: int) -> bytes:
    if n < 56:
        return bytes([offset + n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([offset + 55 + len(raw)]) + raw


def rlp_decode(data: bytes) -> RlpItem:
    item, end = _item(data, 0)
    if end != len(data):
        raise ValueError("rlp: trailing bytes")
    return item


def _item(data: bytes, i: int) -> tuple[RlpItem, int]:
    if i >= len(data):
        raise ValueError("rlp: truncated")
    prefix = data[i]
    if prefix < 0x80:
        return data[i : i + 1], i + 1
    if prefix < 0xC0:
        start, size = _span(data, i, prefix - 0x80, 0xB7)
        if start + size > len(data):
            raise ValueError("rlp: truncated")
        return data[start : start + size], start + size
    start, size = _span(data, i, prefix - 0xC0, 0xF7)
    end = start + size
    if end > len(data):
        raise ValueError("rlp: truncated")
    items: list[RlpItem] = []
    j = start
    while j < end:
        sub, j = _item(data, j)
        items.append(sub)
    if j != end:
        raise ValueError("rlp: list length mismatch")
    return items, end


def _span(data: bytes, i: int, short: int, long_base: int) -> tuple[int, int]:
    """(start, size) of a string or list whose prefix byte is data[i]."""
    if short < 56:
        return i + 1, short
    n = data[i] - long_base
    return i + 1 + n, int.from_bytes(data[i + 1 : i + 1 + n], "big")


# -- secp256k1 recovery -----------------------------------------------------------------

_P: Final = 2**256 - 2**32 - 977
_N: Final = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_G: Final = (
    0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
    0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8,
)
_Point = tuple[int, int] | None


def _add(p: _Point, q: _Point) -> _Point:
    if p is None:
        return q
    if q is None:
        return p
    if p[0] == q[0] and (p[1] + q[1]) % _P == 0:
        return None
    if p == q:
        slope = 3 * p[0] * p[0] * pow(2 * p[1], -1, _P) % _P
    else:
        slope = (q[1] - p[1]) * pow(q[0] - p[0], -1, _P) % _P
    x = (slope * slope - p[0] - q[0]) % _P
    return x, (slope * (p[0] - x) - p[1]) % _P


def _mul(k: int, p: _Point) -> _Point:
    out: _Point = None
    while k:
        if k & 1:
            out = _add(out, p)
        p = _add(p, p)
        k >>= 1
    return out


def _recover(digest: bytes, parity: int, r: int, s: int) -> bytes:
    """The 20-byte address whose key signed ``digest`` with (r, s, parity)."""
    if not (0 < r < _N and 0 < s <= _N // 2) or parity not in (0, 1):
        raise ValueError("invalid signature")
    y2 = (pow(r, 3, _P) + 7) % _P
    y = pow(y2, (_P + 1) // 4, _P)
    if y * y % _P != y2:
        raise ValueError("invalid signature")
    if y % 2 != parity:
        y = _P - y
    z = int.from_bytes(digest, "big")
    r_inv = pow(r, -1, _N)
    q = _add(_mul(s * r_inv % _N, (r, y)), _mul(-z * r_inv % _N, _G))
    if q is None:
        raise ValueError("invalid signature")
    return keccak256(q[0].to_bytes(32, "big") + q[1].to_bytes(32, "big"))[-20:]


# -- transactions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecodedTx:
    """What a node reads from a signed transaction (legacy, EIP-2930 or EIP-1559)."""

    hash: str
    sender: str
    type: int
    chain_id: int | None
    nonce: int
    gas: int
    to: str | None
    value: int
    data: str
    gas_price: int | None  # legacy and type 1
    max_fee: int | None  # type 2
    max_priority_fee: int | None  # type 2
    v: int
    r: int
    s: int


def _int(b: RlpItem) -> int:
    if not isinstance(b, bytes) or (len(b) > 1 and b[0] == 0):
        raise ValueError("rlp: not a canonical integer")
    return int.from_bytes(b, "big")


def _bytes(b: RlpItem) -> bytes:
    if not isinstance(b, bytes):
        raise ValueError("rlp: expected bytes")
    return b


def _address(b: RlpItem) -> str | None:
    raw = _bytes(b)
    if not raw:
        return None
    if len(raw) != 20:
        raise ValueError("bad recipient")
    return "0x" + raw.hex()


def decode_raw_tx(raw: bytes) -> DecodedTx:
    """Decode and recover the sender; ValueError for anything a node would refuse."""
    if not raw:
        raise ValueError("empty transaction")
    tx_hash = "0x" + keccak256(raw).hex()
    if raw[0] >= 0xC0:  # legacy: an RLP list
        fields = rlp_decode(raw)
        if not isinstance(fields, list) or len(fields) != 9:
            raise ValueError("legacy transaction: expected 9 fields")
        v, r, s = (_int(f) for f in fields[6:9])
        if v in (27, 28):
            chain_id, parity, signed = None, v - 27, fields[:6]
        elif v >= 35:
            chain_id, parity = (v - 35) // 2, (v - 35) % 2
            signed = [*fields[:6], _enc(chain_id), b"", b""]
        else:
            raise ValueError("bad v")
        nonce, gas_price, gas = (_int(f) for f in fields[:3])
        sender = _recover(keccak256(rlp_encode(signed)), parity, r, s)
        return DecodedTx(
            tx_hash, "0x" + sender.hex(), 0, chain_id, nonce, gas, _address(fields[3]),
            _int(fields[4]), "0x" + _bytes(fields[5]).hex(), gas_price, None, None, v, r, s,
        )  # fmt: skip
    kind = raw[0]
    fields = rlp_decode(raw[1:])
    if not isinstance(fields, list):
        raise ValueError("typed transaction: expected a list")
    price: int | None = None
    max_fee: int | None = None
    max_priority: int | None = None
    if kind == 1 and len(fields) == 11:
        chain_id, nonce, price, gas = (_int(f) for f in fields[:4])
        to, value, data = fields[4], fields[5], fields[6]
    elif kind == 2 and len(fields) == 12:
        chain_id, nonce, max_priority, max_fee, gas = (_int(f) for f in fields[:5])
        to, value, data = fields[5], fields[6], fields[7]
    else:
        raise ValueError(f"transaction type {kind} is not supported by the demo node")
    parity, r, s = (_int(f) for f in fields[-3:])
    sender = _recover(keccak256(bytes([kind]) + rlp_encode(fields[:-3])), parity, r, s)
    return DecodedTx(
        tx_hash, "0x" + sender.hex(), kind, chain_id, nonce, gas, _address(to), _int(value),
        "0x" + _bytes(data).hex(), price, max_fee, max_priority, parity, r, s,
    )  # fmt: skip


def _enc(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def contract_address(sender: str, nonce: int) -> str:
    """Where a contract created by ``sender`` at ``nonce`` lives."""
    return "0x" + keccak256(rlp_encode([bytes.fromhex(sender[2:]), _enc(nonce)]))[-20:].hex()
