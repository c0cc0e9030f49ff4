"""Signed transactions for the transaction tests (eth-account, what web3.py signs with)."""

from __future__ import annotations

import sys
from typing import Any

# py_ecc (under eth_account) raises the recursion limit to 100,000 when imported;
# put it back, or a later test's deeply nested JSON overflows the C stack.
_RECURSION_LIMIT = sys.getrecursionlimit()
from eth_account import Account  # noqa: E402
from eth_account.signers.local import LocalAccount  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

TO = "0x" + "22" * 20


def sender_account(seed: int) -> LocalAccount:
    """A fixed account per seed (the same sender in every test that asks for it)."""
    acct: LocalAccount = Account.from_key("0x" + f"{seed:064x}")
    return acct


def signed(acct: LocalAccount, nonce: int = 0, chain_id: int = 56, **fields: Any) -> str:
    """An EIP-1559 transfer of 1 wei as 0x-hex raw bytes."""
    tx = {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "maxFeePerGas": 2 * 10**9,
        "maxPriorityFeePerGas": 10**9,
        "gas": 21_000,
        "to": TO,
        "value": 1,
        "data": b"",
        **fields,
    }
    return "0x" + bytes(acct.sign_transaction(tx).raw_transaction).hex()


def tx_hash(raw: str) -> str:
    from gateway.tx.codec import decode_raw_tx

    return decode_raw_tx(bytes.fromhex(raw[2:])).hash
