"""The demo nodes' transaction reader against the libraries dapps sign with (issue 20).

Keccak-256, RLP and sender recovery are written out in ``gateway.demo.txcodec``
(the runtime has no crypto library); here they must agree with eth-hash and
eth-account, the code web3.py itself runs, for every transaction type the
demo accepts, and refuse what a node refuses.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.demo import wallet
from gateway.demo.txcodec import contract_address, decode_raw_tx, keccak256, rlp_decode

# py_ecc (under eth_account and web3) raises the recursion limit to 100,000 when
# imported; put it back, or a later test's deeply nested JSON overflows the C stack.
_RECURSION_LIMIT = sys.getrecursionlimit()
from eth_account import Account  # noqa: E402
from eth_hash.auto import keccak  # noqa: E402
from web3.types import Nonce  # noqa: E402
from web3.utils.address import get_create_address  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

ACCOUNT = Account.from_key("0x" + "42" * 32)
TO = "0x" + "22" * 20
TXS: list[dict[str, Any]] = [
    {"nonce": 0, "gasPrice": 10**9, "gas": 21000, "to": TO, "value": 5, "data": b"", "chainId": 56},
    {"nonce": 0, "gasPrice": 10**9, "gas": 21000, "to": TO, "value": 5, "data": b""},  # pre-155
    {
        "type": 1, "nonce": 7, "gasPrice": 10**9, "gas": 50000, "to": TO, "value": 0,
        "data": b"\x01", "chainId": 56, "accessList": [],
    },
    {
        "type": 2, "nonce": 3, "maxFeePerGas": 2 * 10**9, "maxPriorityFeePerGas": 10**9,
        "gas": 90000, "to": TO, "value": 10**18, "data": b"\xab" * 100, "chainId": 204,
    },
    {"type": 2, "nonce": 0, "maxFeePerGas": 1, "maxPriorityFeePerGas": 1, "gas": 60000,
     "to": b"", "value": 0, "data": b"\x60\x00", "chainId": 56},
]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600))
def test_keccak_matches_eth_hash(data: bytes) -> None:
    assert keccak256(data) == keccak(data)


@pytest.mark.parametrize("length", [0, 1, 135, 136, 137, 272])
def test_keccak_at_the_block_edges(length: int) -> None:
    assert keccak256(b"\x5a" * length) == keccak(b"\x5a" * length)


@pytest.mark.parametrize("tx", TXS, ids=lambda t: f"type{t.get('type', 0)}-{t.get('chainId')}")
def test_decodes_what_eth_account_signs(tx: dict[str, Any]) -> None:
    signed = ACCOUNT.sign_transaction(tx)
    decoded = decode_raw_tx(bytes(signed.raw_transaction))
    assert decoded.hash == "0x" + bytes(signed.hash).hex()
    assert decoded.sender == ACCOUNT.address.lower()
    assert (decoded.nonce, decoded.gas, decoded.value) == (tx["nonce"], tx["gas"], tx["value"])
    assert decoded.chain_id == tx.get("chainId")
    assert decoded.to == (tx["to"] or None)
    assert decoded.data == "0x" + tx["data"].hex()


def test_contract_address_matches_eth_utils() -> None:
    for nonce in (0, 1, 127, 128, 70000):
        assert (
            contract_address(ACCOUNT.address.lower(), nonce)
            == get_create_address(ACCOUNT.address, Nonce(nonce)).lower()
        )


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x01", b"\xf8", b"\xc3\x01\x02", b"\x03\xc0", b"\x02" + b"\xc1\x80", b"\xf86c01"],
)
def test_garbage_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_raw_tx(raw)


def test_tampered_signature_changes_the_sender_or_is_refused() -> None:
    raw = bytearray(ACCOUNT.sign_transaction(TXS[3]).raw_transaction)
    raw[-5] ^= 0x01  # inside s
    with contextlib.suppress(ValueError):
        assert decode_raw_tx(bytes(raw)).sender != ACCOUNT.address.lower()


def test_rlp_rejects_truncation() -> None:
    with pytest.raises(ValueError):
        rlp_decode(b"\xc5\x83abc")


def test_ledger_keeps_nonces_like_a_node() -> None:
    ledger = wallet.Ledger(56)
    send = ACCOUNT.sign_transaction(TXS[0]).raw_transaction.hex()

    def call(method: str, *params: Any) -> Any:
        return wallet.answer(method, list(params), ledger=ledger, head=10, block_hash=hex)

    tx_hash = call("eth_sendRawTransaction", "0x" + send.removeprefix("0x"))
    assert call("eth_getTransactionCount", ACCOUNT.address, "pending") == "0x1"
    receipt = call("eth_getTransactionReceipt", tx_hash)
    assert receipt["from"] == ACCOUNT.address.lower() and receipt["blockNumber"] == "0xa"
    with pytest.raises(wallet.NodeError, match=r"already known|nonce too low"):
        call("eth_sendRawTransaction", "0x" + send.removeprefix("0x"))
    other_chain = ACCOUNT.sign_transaction({**TXS[0], "nonce": 1, "chainId": 97})
    with pytest.raises(wallet.NodeError, match="invalid chain id"):
        call("eth_sendRawTransaction", "0x" + bytes(other_chain.raw_transaction).hex())
    gap = ACCOUNT.sign_transaction({**TXS[0], "nonce": 5})
    with pytest.raises(wallet.NodeError, match="nonce too high"):
        call("eth_sendRawTransaction", "0x" + bytes(gap.raw_transaction).hex())
    assert call("eth_getTransactionReceipt", "0x" + "00" * 32) is None
    history = call("eth_feeHistory", "0x4", "latest", [10, 90])
    assert history["oldestBlock"] == "0x7" and len(history["reward"]) == 4
    assert call("web3_clientVersion").startswith(wallet.CLIENT_VERSION)
