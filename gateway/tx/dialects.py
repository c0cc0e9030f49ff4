"""How each builder is spoken to: the request a ``Message`` becomes in a builder's dialect.

BSC's private-transaction market is many builders, each with its own
request shapes (as their docs give them):

- ``plain``: the call as the client sent it (checked and rebuilt):
  ``eth_sendRawTransaction``, ``eth_sendBundle`` and the rest as they came.
- ``48club``: the same methods; a bundle carries ``48spSign`` when the
  endpoint has a SoulPoint key (``sign_key_env``): the key's signature
  over ``keccak256`` of the bundle's transaction hashes concatenated, 65
  bytes ``r || s || v`` (v 27 or 28) as 0x-hex, as 48 Club documents it
  (and as its clients compute it with ethers' ``signingKey.sign``).
- ``blockrazor``: the same methods; a bundle carries ``noMerge`` and
  ``positionFirst`` from the key's settings.
- ``bloxroute``: a raw transaction is ``bsc_private_tx`` ``{transaction
  (hex without 0x), mev_builders}``, a bundle ``blxr_submit_bundle``
  ``{transaction: [hex without 0x], block_number, reverting_hashes,
  mev_builders}``, both with the ``Authorization`` header; the key's
  ``mev_builders`` setting names the builders (default ``["all"]``).

Secrets (the Authorization header's value, the SoulPoint key) come from
the environment variables the config names, read once when the gateway
starts, and never appear in a log or a page. Signing uses eth-keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from eth_hash.auto import keccak
from eth_keys.datatypes import PrivateKey

from gateway.config import BuilderConfig
from gateway.tx.routes import Message

SEND_RAW: Final = "eth_sendRawTransaction"
SEND_BUNDLE: Final = "eth_sendBundle"
JSON_HEADERS: Final = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Voice:
    """One builder's dialect and its secrets, ready to turn messages into requests."""

    builder: BuilderConfig
    auth: str = ""  # the Authorization header's value, "" = none
    sign_key: PrivateKey | None = None

    @classmethod
    def of(cls, builder: BuilderConfig, env: Mapping[str, str] | None = None) -> Voice:
        env = os.environ if env is None else env
        auth = env.get(builder.auth_header_env, "") if builder.auth_header_env else ""
        key = None
        if builder.sign_key_env:
            text = env.get(builder.sign_key_env, "").removeprefix("0x")
            key = PrivateKey(bytes.fromhex(text))
        return cls(builder, auth, key)

    def headers(self) -> dict[str, str]:
        if not self.auth:
            return JSON_HEADERS
        return {**JSON_HEADERS, "Authorization": self.auth}

    def body(self, message: Message, gid: int) -> bytes:
        """The request ``message`` is in this builder's dialect (``gid``: its id)."""
        dialect = self.builder.dialect
        if dialect == "bloxroute":
            shaped = _bloxroute(message)
            if shaped is not None:
                method, params = shaped
                return _request(gid, method, params)
        if message.method == SEND_BUNDLE and dialect in ("48club", "blockrazor"):
            bundle = dict(message.params[0])
            if dialect == "48club" and self.sign_key is not None:
                bundle["48spSign"] = sign_bundle(self.sign_key, message.raws)
            if dialect == "blockrazor":
                for name in ("noMerge", "positionFirst"):
                    if name in message.options:
                        bundle[name] = bool(message.options[name])
            return _request(gid, SEND_BUNDLE, [bundle])
        return message.body


def sign_bundle(key: PrivateKey, raws: tuple[str, ...]) -> str:
    """48 Club's ``48spSign``: the key's signature over keccak256(hash_1 || ... || hash_n)."""
    hashes = b"".join(keccak(bytes.fromhex(raw[2:])) for raw in raws)
    sig = key.sign_msg_hash(keccak(hashes))
    r, s, v = int(sig.r), int(sig.s), int(sig.v)
    return "0x" + (r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([v + 27])).hex()


def _bloxroute(message: Message) -> tuple[str, dict[str, Any]] | None:
    builders = list(message.options.get("mev_builders") or ["all"])
    if message.method == SEND_RAW:
        return "bsc_private_tx", {
            "transaction": message.raws[0][2:],
            "mev_builders": builders,
        }
    if message.method == SEND_BUNDLE:
        bundle = message.params[0]
        params: dict[str, Any] = {
            "transaction": [raw[2:] for raw in message.raws],
            "mev_builders": builders,
        }
        block = bundle.get("maxBlockNumber")
        if block is not None:
            params["block_number"] = block if isinstance(block, str) else hex(block)
        if bundle.get("revertingTxHashes"):
            params["reverting_hashes"] = list(bundle["revertingTxHashes"])
        return "blxr_submit_bundle", params
    return None


def _request(gid: int, method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": gid, "method": method, "params": params})


def answer_of(result: Any) -> Any:
    """A builder's result as the client's method answers it (bloXroute wraps the hash)."""
    if isinstance(result, dict):
        for name in ("bundleHash", "txHash", "tx_hash"):
            if isinstance(result.get(name), str):
                value: str = result[name]
                return value if value.startswith("0x") else "0x" + value
    return result
