"""Objects inside params read the way a Go node reads them, and rebuilt canonically (no I/O).

The gateway measures, routes and caches on a few objects inside ``params``:
the ``eth_getLogs`` / ``eth_newFilter`` filter and the EIP-1898 block object
(``{blockNumber | blockHash, requireCanonical}``) of the state reads. geth
(and BSC and op-geth, its forks) decodes them with Go's ``encoding/json``:

- a member sets a field when its name equals the field's under Go's folding
  (Go >= 1.21 ``foldName``: ASCII letters upper-cased, any other rune mapped
  through ``ToUpper(ToLower(r))``; of those only K KELVIN SIGN, LATIN SMALL
  LONG S, and the dotted / dotless I fold to ASCII letters). An exact match
  is preferred, which only matters when two fields fold alike: none here.
- the last member for a field wins; unknown members are ignored;
- ``null`` sets a pointer, interface or slice field to nil (absent) and
  leaves a plain ``bool`` as it was.

So ``{"FromBlock":"0x0"}`` is a scan from block 0 for geth, and a gateway
that read ``fromBlock`` with exact spelling measured ``latest..latest``.
Here the object is read Go-style and the call's params are REPLACED by the
gateway's canonical rebuild (canonical key spellings, unknown members
dropped, values validated as geth validates them, block numbers written as
lower-case hex without leading zeros), which is all a node ever receives.

The request body was parsed by orjson into a dict before it gets here:
exact duplicate keys have already collapsed to their last value, while
case variants survive as separate keys in first-appearance order. "Last
wins" by dict order can therefore differ from what Go would read from the
client's original bytes (``{"fromBlock":a,"FROMBLOCK":b,"fromBlock":c}``:
Go reads c, the dict order gives b). That is harmless ONLY because the
client's object never reaches a node: the node decodes the rebuild, in
which every field appears once, so the gateway and the node judge the same
thing by construction.

Refusals are -32602 with geth's words in ``error.data.reason``.

It stays whole because the filter and the EIP-1898 block object are read by the
same Go rules (``go_members``, the hex readers, ``Refused``), and most of its
length is this docstring and geth's exact refusal words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from gateway.intel.methods import STATE_AT, TAGS

# geth eth/filters: at most this many topic positions (errExceedMaxTopics).
MAX_TOPICS: Final = 4
# geth eth/filters: at most this many addresses in one filter (errExceedMaxAddresses).
# Past it a filter is refused here, before it costs a node scan or a Redis entry.
MAX_ADDRESSES: Final = 1000
_MAX_INT64: Final = (1 << 63) - 1

# Where a method takes a block that may be an EIP-1898 object (geth's
# ``rpc.BlockNumberOrHash``): every read of state at a block (the cache's own
# table, so both always read the same block), and three more that take one.
BLOCK_PARAM: Final[dict[str, int]] = {
    **STATE_AT,
    "eth_estimateGas": 1,
    "eth_getBlockReceipts": 0,
    "debug_traceCall": 1,
}
# Methods whose param 0 is a log filter (geth's ``FilterCriteria``).
LOG_FILTER_PARAM: Final = frozenset({"eth_getLogs", "eth_newFilter"})

_FILTER_FIELDS: Final = ("blockHash", "fromBlock", "toBlock", "address", "topics")
_BLOCK_FIELDS: Final = ("blockNumber", "blockHash", "requireCanonical")
# Non-ASCII runes whose Go fold is an ASCII letter (checked over all of Unicode).
_FOLD_TO_ASCII: Final = {"\u212a": "K", "\u017f": "S", "\u0130": "I", "\u0131": "I"}
_HEX_DIGITS: Final = re.compile(r"[0-9a-fA-F]*\Z")


def go_fold(name: str) -> str:
    """``name`` folded as Go's ``encoding/json`` folds member names, exact against ASCII names.

    Runes that do not fold to ASCII are kept as they are: they can never
    equal an (ASCII) field name, which is all this is used for.
    """
    if name.isascii():
        return name.upper()
    return "".join(ch.upper() if ch.isascii() else _FOLD_TO_ASCII.get(ch, ch) for ch in name)


_FOLDED: Final = {go_fold(n): n for n in (*_FILTER_FIELDS, *_BLOCK_FIELDS)}


def go_members(obj: dict[str, Any], fields: tuple[str, ...]) -> list[tuple[str, Any]]:
    """The members of ``obj`` that set one of ``fields``, as (field, value) in order.

    Unknown members are left out, as Go ignores them; the caller applies the
    values in order, so the last one for a field wins.
    """
    out = []
    for key, value in obj.items():
        name = key if key in fields else _FOLDED.get(go_fold(key))
        if name is not None and name in fields:
            out.append((name, value))
    return out


# -- values, as geth's decoders check them -----------------------------------------
class Refused(ValueError):
    """A value geth would refuse; the message is geth's complaint."""


def _hex_error(text: str) -> str | None:
    """hexutil.Decode's complaint about ``text`` (the bytes' length is the caller's)."""
    if not text:
        return "empty hex string"
    if text[:2] not in ("0x", "0X"):
        return "hex string without 0x prefix"
    if len(text) % 2:
        return "hex string of odd length"
    if not _HEX_DIGITS.match(text, 2):
        return "invalid hex string"
    return None


def read_block_number(value: Any) -> str | int:
    """A ``rpc.BlockNumber``: a tag (str) or the number (int); raises ``Refused``.

    A non-string is refused as geth refuses it (it strips quotes and reads
    hex, so ``16`` is "without 0x prefix"); numbers are hex (``0x`` or
    ``0X``) without leading zeros, at most 64 bits and at most int64.
    """
    if type(value) is not str:
        raise Refused("hex string without 0x prefix")
    if value in TAGS:
        return value
    if not value:
        raise Refused("empty hex string")
    if value[:2] not in ("0x", "0X"):
        raise Refused("hex string without 0x prefix")
    digits = value[2:]
    if not digits:
        raise Refused('hex string "0x"')
    if len(digits) > 1 and digits[0] == "0":
        raise Refused("hex number with leading zero digits")
    if not _HEX_DIGITS.match(digits):
        raise Refused("invalid hex string")
    if len(digits) > 16:
        raise Refused("hex number > 64 bits")
    number = int(digits, 16)
    if number > _MAX_INT64:
        raise Refused("block number larger than int64")
    return number


def _canonical_number(ref: str | int) -> str:
    """A block as every node reads it alike: a tag, or lower-case hex without leading zeros."""
    return ref if isinstance(ref, str) else hex(ref)


def _read_hash(value: Any, field: str) -> str:
    """A ``common.Hash`` (32 bytes of hex), as sent; raises ``Refused`` in geth's words."""
    if type(value) is not str:
        raise Refused(
            f"json: cannot unmarshal non-string into Go struct field {field} of type common.Hash"
        )
    error = _hex_error(value) if value else None
    if error is None and len(value) != 66:
        error = f"hex string has length {max(0, len(value) - 2)}, want 64 for common.Hash"
    if error is not None:
        raise Refused(
            f"json: cannot unmarshal {error} into Go struct field {field} of type common.Hash"
        )
    return value


def _read_bytes(value: str, size: int, what: str) -> str:
    """hexutil.Decode of ``size`` bytes (an address, a topic), as sent; raises ``Refused``."""
    error = _hex_error(value)
    if error is None and len(value) != 2 + 2 * size:
        error = (
            f"hex has invalid length {(len(value) - 2) // 2} after decoding; "
            f"expected {size} for {what}"
        )
    if error is not None:
        raise Refused(error)
    return value


# -- the log filter -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LogFilter:
    """A log filter as geth reads it; ``None`` = absent.

    ``from_block``/``to_block`` are a tag or a block number (int); addresses
    and topics are kept as sent (validated), a topic position whose
    alternatives hold a null already widened to a wildcard, as geth widens it.
    """

    block_hash: str | None = None
    from_block: str | int | None = None
    to_block: str | int | None = None
    address: str | list[str] | None = None
    topics: list[str | list[str] | None] | None = None


def read_filter(obj: Any) -> LogFilter | str:
    """Read ``obj`` as geth's ``FilterCriteria.UnmarshalJSON`` does; a str is why not.

    JSON ``null`` (Go: the empty filter) reads as ``{}``. More topic
    positions than ``MAX_TOPICS`` ("exceed max topics") or more addresses
    than ``MAX_ADDRESSES`` ("exceed max addresses") are refused here, as
    geth's ``eth_getLogs`` and ``eth_newFilter`` refuse them.
    """
    try:
        return _read_filter(obj)
    except Refused as exc:
        return str(exc)


def _read_filter(obj: Any) -> LogFilter:
    if obj is None:
        obj = {}
    if type(obj) is not dict:
        kind = "array" if type(obj) is list else "string" if type(obj) is str else "value"
        raise Refused(f"json: cannot unmarshal {kind} into Go value of type filters.FilterCriteria")
    fields: dict[str, Any] = {}
    for name, value in go_members(obj, _FILTER_FIELDS):
        fields[name] = value  # every field is a pointer, interface or slice: null = absent
    block_hash = fields.get("blockHash")
    if block_hash is not None:
        _read_hash(block_hash, "input.blockHash")
        if fields.get("fromBlock") is not None or fields.get("toBlock") is not None:
            raise Refused(
                "cannot specify both BlockHash and FromBlock/ToBlock, choose one or the other"
            )
    ends = [
        None if fields.get(name) is None else read_block_number(fields[name])
        for name in ("fromBlock", "toBlock")
    ]
    address = _read_address(fields.get("address"))
    topics = _read_topics(fields.get("topics"))
    return LogFilter(block_hash, ends[0], ends[1], address, topics)


def _read_address(value: Any) -> str | list[str] | None:
    if value is None:
        return None
    if type(value) is str:
        try:
            return _read_bytes(value, 20, "address")
        except Refused as exc:
            raise Refused(f"invalid address: {exc}") from None
    if type(value) is not list:
        raise Refused("invalid addresses in query")
    if len(value) > MAX_ADDRESSES:
        raise Refused(f"exceed max addresses: {len(value)} given, at most {MAX_ADDRESSES}")
    for i, item in enumerate(value):
        if type(item) is not str:
            raise Refused(f"non-string address at index {i}")
        try:
            _read_bytes(item, 20, "address")
        except Refused as exc:
            raise Refused(f"invalid address at index {i}: {exc}") from None
    return list(value)


def _read_topics(value: Any) -> list[str | list[str] | None] | None:
    if value is None:
        return None
    if type(value) is not list:
        kind = "object" if type(value) is dict else "string" if type(value) is str else "value"
        raise Refused(
            f"json: cannot unmarshal {kind} into Go struct field input.topics "
            "of type []interface {}"
        )
    if len(value) > MAX_TOPICS:
        raise Refused("exceed max topics")
    out: list[str | list[str] | None] = []
    for position in value:
        if position is None or type(position) is str:
            out.append(position if position is None else _read_bytes(position, 32, "topic"))
        elif type(position) is list:
            out.append(_read_alternatives(position))
        else:
            raise Refused("invalid topic(s)")
    return out


def _read_alternatives(position: list[Any]) -> list[str] | None:
    """One topic position's alternatives; None (any topic) once a null is met, as in geth."""
    alternatives: list[str] = []
    for item in position:
        if item is None:
            return None  # geth stops reading here: what follows is not looked at
        if type(item) is not str:
            raise Refused("invalid topic(s)")
        alternatives.append(_read_bytes(item, 32, "topic"))
    return alternatives


def canonical_filter(flt: LogFilter) -> dict[str, Any]:
    """The filter object a node receives: canonical names, each field once, absent ones left out."""
    out: dict[str, Any] = {}
    if flt.block_hash is not None:
        out["blockHash"] = flt.block_hash
    if flt.from_block is not None:
        out["fromBlock"] = _canonical_number(flt.from_block)
    if flt.to_block is not None:
        out["toBlock"] = _canonical_number(flt.to_block)
    if flt.address is not None:
        out["address"] = flt.address
    if flt.topics is not None:
        out["topics"] = flt.topics
    return out


# -- the EIP-1898 block object ---------------------------------------------------------
def canonical_block_object(obj: dict[str, Any]) -> dict[str, Any]:
    """``{blockNumber}`` or ``{blockHash[, requireCanonical: true]}`` as geth reads ``obj``.

    Raises ``Refused``. ``requireCanonical`` only means something beside a
    hash, and only when true (geth's default is false), so it is kept then only.
    """
    number: Any = None
    block_hash: Any = None
    canonical = False
    for name, value in go_members(obj, _BLOCK_FIELDS):
        if name == "blockNumber":
            number = value
        elif name == "blockHash":
            block_hash = value
        elif value is not None:  # a plain bool: null leaves it as it was
            if type(value) is not bool:
                raise Refused(
                    "json: cannot unmarshal non-bool into Go struct field "
                    ".requireCanonical of type bool"
                )
            canonical = value
    if block_hash is not None:
        _read_hash(block_hash, ".blockHash")
    if number is not None:
        number = read_block_number(number)
        if block_hash is not None:
            raise Refused("cannot specify both BlockHash and BlockNumber, choose one or the other")
        return {"blockNumber": _canonical_number(number)}
    if block_hash is None:
        raise Refused("neither block nor hash specified")
    if canonical:
        return {"blockHash": block_hash, "requireCanonical": True}
    return {"blockHash": block_hash}


# -- per method ------------------------------------------------------------------------
def canonical_params(method: str, params: Any) -> tuple[Any, str | None]:
    """(params to forward, None), or (params, the reason for -32602).

    Only the objects the gateway judges are rebuilt; every other param is
    forwarded as sent. Cheap for everything else: one dict lookup.
    """
    if method in LOG_FILTER_PARAM:
        return _filter_params(params)
    index = BLOCK_PARAM.get(method)
    if index is None or type(params) is not list or len(params) <= index:
        return params, None
    block = params[index]
    if type(block) is not dict:
        return params, None  # a tag, number or hash string: the node reads it as we do
    try:
        rebuilt = canonical_block_object(block)
    except Refused as exc:
        return params, f"invalid argument {index}: {exc}"
    out = list(params)
    out[index] = rebuilt
    return out, None


def _filter_params(params: Any) -> tuple[Any, str | None]:
    if type(params) is not list:
        if params is None:
            return params, "missing value for required argument 0"
        return params, "non-array args"
    if not params:
        return params, "missing value for required argument 0"
    if len(params) > 1:
        return params, "too many arguments, want at most 1"
    try:
        flt = _read_filter(params[0])
    except Refused as exc:
        reason = str(exc)
        return params, reason if reason == "exceed max topics" else f"invalid argument 0: {reason}"
    return [canonical_filter(flt)], None
