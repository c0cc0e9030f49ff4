"""``read_filter``: a logs filter object read the way geth reads it, rebuilt canonically.

Go's ``encoding/json`` matches keys case-insensitively and the last one wins,
so ``{"address": A, "Address": B}`` filters on B at the node; the gateway
reads the object the same way and keeps only its canonical rebuild, so what
it stores, scans and forwards is what a node would have judged.

A stand-in until the shared Go-style reader (gateway/rpc/params.py) lands;
everything here goes through this one function, so swapping it is one edit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from gateway.intel.methods import TAGS

MAX_ADDRESSES: Final = 1000  # geth's limit on a filter's addresses
MAX_TOPICS: Final = 4
MAX_TOPIC_OPTIONS: Final = 1000  # alternatives in one topic position

_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_HASH: Final = re.compile(r"0x[0-9a-fA-F]{64}\Z")
_QUANTITY: Final = re.compile(r"0x(?:0|[1-9a-fA-F][0-9a-fA-F]{0,15})\Z")


class FilterParamsError(ValueError):
    """The filter object is not one a node would accept; the message says why."""


@dataclass(frozen=True, slots=True)
class LogFilter:
    """A validated logs filter. Blocks are tags or numbers (None = not given)."""

    addresses: tuple[str, ...] = ()
    topics: tuple[tuple[str, ...] | None, ...] = ()  # None = any topic at that position
    from_block: str | int | None = None
    to_block: str | int | None = None
    block_hash: str | None = None

    def criteria(self) -> dict[str, Any]:
        """``address`` and ``topics`` as a node takes them (no block range)."""
        out: dict[str, Any] = {}
        if self.addresses:
            out["address"] = list(self.addresses)
        if self.topics:
            out["topics"] = [None if t is None else list(t) for t in self.topics]
        return out

    def to_json(self) -> dict[str, Any]:
        """Everything, for storing (``from_json`` reads it back)."""
        out = self.criteria()
        for name, value in (("fromBlock", self.from_block), ("toBlock", self.to_block)):
            if value is not None:
                out[name] = value if isinstance(value, str) else hex(value)
        if self.block_hash is not None:
            out["blockHash"] = self.block_hash
        return out


def read_filter(obj: Any) -> LogFilter:
    """The filter object of eth_newFilter / eth_getLogs, or ``FilterParamsError``."""
    if obj is None:
        return LogFilter()
    if type(obj) is not dict:
        raise FilterParamsError("filter must be an object")
    fields: dict[str, Any] = {}
    for key, value in obj.items():  # Go: case-insensitive keys, the last one wins
        if type(key) is str:
            fields[key.lower()] = value
    block_hash = fields.get("blockhash")
    if block_hash is not None:
        if type(block_hash) is not str or not _HASH.match(block_hash):
            raise FilterParamsError("blockHash must be a 32-byte hex string")
        if fields.get("fromblock") is not None or fields.get("toblock") is not None:
            raise FilterParamsError("cannot specify both BlockHash and FromBlock/ToBlock")
    return LogFilter(
        addresses=_addresses(fields.get("address")),
        topics=_topics(fields.get("topics")),
        from_block=_block(fields.get("fromblock"), "fromBlock"),
        to_block=_block(fields.get("toblock"), "toBlock"),
        block_hash=block_hash.lower() if block_hash is not None else None,
    )


def _addresses(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if type(value) is str else value
    if type(items) is not list:
        raise FilterParamsError("address must be a string or an array of strings")
    if len(items) > MAX_ADDRESSES:
        raise FilterParamsError(f"more than {MAX_ADDRESSES} addresses")
    out = []
    for item in items:
        if type(item) is not str or not _ADDRESS.match(item):
            raise FilterParamsError("address must be 20-byte hex strings")
        out.append(item.lower())
    return tuple(out)


def _topics(value: Any) -> tuple[tuple[str, ...] | None, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise FilterParamsError("topics must be an array")
    if len(value) > MAX_TOPICS:
        raise FilterParamsError(f"more than {MAX_TOPICS} topic positions")
    out: list[tuple[str, ...] | None] = []
    for position in value:
        if position is None:
            out.append(None)
            continue
        options = [position] if type(position) is str else position
        if type(options) is not list or len(options) > MAX_TOPIC_OPTIONS:
            raise FilterParamsError("a topic must be null, a hash or an array of hashes")
        hashes: list[str] = []
        wildcard = False
        for option in options:
            if option is None:
                wildcard = True  # [null, X] matches anything at that position
            elif type(option) is str and _HASH.match(option):
                hashes.append(option.lower())
            else:
                raise FilterParamsError("topics must be 32-byte hex strings")
        out.append(None if wildcard or not hashes else tuple(hashes))
    while out and out[-1] is None:  # trailing wildcards match the same logs
        out.pop()
    return tuple(out)


def _block(value: Any, name: str) -> str | int | None:
    if value is None:
        return None
    if type(value) is str:
        if value in TAGS:
            return value
        if _QUANTITY.match(value):
            return int(value, 16)
    raise FilterParamsError(f"{name} must be a block tag or a hex number")
