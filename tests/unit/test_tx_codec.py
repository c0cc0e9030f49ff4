"""The transaction decoder (``gateway.tx.codec``) against the library dapps sign with.

The gateway and the demo nodes read transactions with it; here it must
agree with eth-account (what web3.py itself runs) for every transaction
type a wallet sends, and refuse in geth's words what a node refuses.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import pytest
import rlp

from gateway.demo import wallet
from gateway.tx.codec import TxError, contract_address, decode_raw_tx, parse_hex

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


@pytest.mark.parametrize("tx", TXS, ids=lambda t: f"type{t.get('type', 0)}-{t.get('chainId')}")
def test_decodes_what_eth_account_signs(tx: dict[str, Any]) -> None:
    signed = ACCOUNT.sign_transaction(tx)
    decoded = decode_raw_tx(bytes(signed.raw_transaction))
    assert decoded.hash == "0x" + bytes(signed.hash).hex()
    assert decoded.sender == ACCOUNT.address.lower()
    assert (decoded.nonce, decoded.gas, decoded.value) == (tx["nonce"], tx["gas"], tx["value"])
    assert decoded.chain_id == tx.get("chainId")
    assert decoded.to == (tx["to"] or None)
    assert decoded.data == tx["data"]
    if tx.get("chainId") is not None:  # checked against the network's chain: the same answer
        assert decode_raw_tx(bytes(signed.raw_transaction), tx["chainId"]) == decoded


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
    with pytest.raises(TxError):
        decode_raw_tx(raw)


def test_tampered_signature_changes_the_sender_or_is_refused() -> None:
    raw = bytearray(ACCOUNT.sign_transaction(TXS[3]).raw_transaction)
    raw[-5] ^= 0x01  # inside s
    with contextlib.suppress(ValueError):
        assert decode_raw_tx(bytes(raw)).sender != ACCOUNT.address.lower()


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


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"", "typed transaction too short"),
        (b"\x02", "typed transaction too short"),
        (b"\x05\xc0", "transaction type not supported"),
        (b"\xc3\x01\x02\x03", "rlp: too few elements for types.LegacyTx"),
        (b"\x02\xc3\x01\x02\x03", "rlp: too few elements for types.DynamicFeeTx"),
        (b"\x01\x05", "rlp: expected input list for types.AccessListTx"),
        (b"\xf8\x40\x01", "rlp: value size exceeds available input length"),
        (b"\xc1\x01\x02", "rlp: input contains more than one value"),
    ],
)
def test_refusals_are_in_geths_words(raw: bytes, words: str) -> None:
    with pytest.raises(TxError) as info:
        decode_raw_tx(raw, 56)
    assert str(info.value).startswith(words)


@pytest.mark.parametrize(
    "tx", [t for t in TXS if t.get("chainId")], ids=lambda t: str(t.get("type", 0))
)
def test_another_chain_is_an_invalid_sender(tx: dict[str, Any]) -> None:
    raw = bytes(ACCOUNT.sign_transaction(tx).raw_transaction)
    with pytest.raises(TxError) as info:
        decode_raw_tx(raw, 97)
    assert str(info.value) == (
        f"invalid sender: invalid chain id for signer: have {tx['chainId']} want 97"
    )


def test_a_pre_eip155_transaction_is_left_to_the_nodes() -> None:
    """Valid on every chain (deterministic deployers use it): each node's own rule decides."""
    raw = bytes(ACCOUNT.sign_transaction(TXS[1]).raw_transaction)
    assert decode_raw_tx(raw, 56).chain_id is None


def test_a_signature_that_recovers_no_key_is_an_invalid_sender() -> None:
    fields = rlp.decode(bytes(ACCOUNT.sign_transaction(TXS[0]).raw_transaction))
    for r, s in ((0, 1), (1, 0), (1, 2**255)):  # zero, or s above half the curve order
        fields[7], fields[8] = (
            rlp.sedes.big_endian_int.serialize(r),
            rlp.sedes.big_endian_int.serialize(s),
        )
        with pytest.raises(TxError, match=r"^invalid sender"):
            decode_raw_tx(rlp.encode(fields), 56)


def test_blob_transaction_network_form() -> None:
    """Type 3 as wallets send it (body, blobs, commitments, proofs): the node's hash is of the body.

    eth-account's ``SignedTransaction.hash`` hashes the whole network form;
    geth (and EIP-4844) hash ``0x03 || rlp(body)``, which is what a node answers.
    """
    tx = {
        "type": 3, "chainId": 56, "nonce": 0, "maxFeePerGas": 10**9,
        "maxPriorityFeePerGas": 10**9, "maxFeePerBlobGas": 10**9, "gas": 21000,
        "to": TO, "value": 0, "data": b"", "accessList": [],
    }  # fmt: skip
    raw = bytes(ACCOUNT.sign_transaction(tx, blobs=[b"\x00" * 131072]).raw_transaction)
    decoded = decode_raw_tx(raw, 56)
    body = rlp.decode(raw[1:])[0]
    assert decoded.hash == "0x" + keccak(b"\x03" + rlp.encode(body)).hex()
    assert (decoded.type, decoded.blobs, decoded.sender) == (3, 1, ACCOUNT.address.lower())


def test_set_code_transaction() -> None:
    auth = ACCOUNT.sign_authorization({"chainId": 56, "address": "0x" + "33" * 20, "nonce": 1})
    tx = {
        "type": 4, "chainId": 56, "nonce": 0, "maxFeePerGas": 10**9,
        "maxPriorityFeePerGas": 10**9, "gas": 50000, "to": TO, "value": 0, "data": b"",
        "accessList": [], "authorizationList": [auth],
    }  # fmt: skip
    signed = ACCOUNT.sign_transaction(tx)
    decoded = decode_raw_tx(bytes(signed.raw_transaction), 56)
    assert decoded.hash == "0x" + bytes(signed.hash).hex()
    assert decoded.sender == ACCOUNT.address.lower()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (5, "non-string"),
        ("f86c", "without 0x prefix"),
        ("0xabc", "odd length"),
        ("0xzz", "invalid hex string"),
    ],
)
def test_hex_argument_is_read_as_geths_hexutil(text: Any, words: str) -> None:
    with pytest.raises(TypeError, match=words):
        parse_hex(text)
    assert parse_hex("0x0aFF") == b"\x0a\xff"
