"""What the WebSocket mock node (``mockws``) answers beyond its chain's plain blocks: a
``newHeads`` header, a log filter's match, a block with its transactions in full, and
BSC's finality API (``eth_getFinalizedHeader``, ``eth_getFinalizedBlock``).

Apart from ``mockws`` so that module stays one chain and one node; these are pure
views of a chain's data, and ``mockws`` re-exports the two its users import.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from eth_hash.auto import keccak

from gateway.demo import wallet


class Chain(Protocol):
    """What these views read of ``mockws.Chain`` (named here, so neither imports the other)."""

    ledger: wallet.Ledger
    head: int

    @property
    def finalized(self) -> int: ...

    def block(self, number: int) -> dict[str, Any] | None: ...

    def block_hash(self, number: int) -> str: ...


# BSC's finality API is offered by BSC's nodes only (opBNB's op-geth answers
# "method not found"); BSC's active validator set is 21.
FINALITY_METHODS: Final = ("eth_getFinalizedHeader", "eth_getFinalizedBlock")
BSC_CHAINS: Final = frozenset({56, 97})
_VALIDATORS: Final = 21
# An ERC-20 Transfer's first topic is the Keccak hash of its signature, so a
# dapp's ``contract.on("Transfer")`` (ethers, viem, web3.py) matches the logs.
TRANSFER_TOPIC: Final = "0x" + keccak(b"Transfer(address,address,uint256)").hex()
_TOKENS: Final = tuple("0x" + f"{i:02x}" * 20 for i in range(1, 4))
# Fields of a block answer that a newHeads header does not carry (geth's shape).
_BLOCK_ONLY: Final = ("transactions", "uncles", "size", "totalDifficulty", "withdrawals")


def _word(n: int) -> str:
    return "0x" + f"{n:064x}"


def transfer_logs(
    number: int, block_hash: str, fork: int, tx_hashes: list[str], *, removed: bool = False
) -> list[dict[str, Any]]:
    """Block ``number``'s logs: one ERC-20 Transfer per transaction hash, from the three
    demo tokens in turn (from and to are small addresses, the value the fork number)."""
    return [
        {
            "address": _TOKENS[(number + i) % len(_TOKENS)],
            "topics": [TRANSFER_TOPIC, _word(number), _word(i)],
            "data": _word(fork),
            "blockNumber": hex(number),
            "blockHash": block_hash,
            "transactionHash": tx_hash,
            "transactionIndex": hex(i),
            "logIndex": hex(i),
            "removed": removed,
        }
        for i, tx_hash in enumerate(tx_hashes)
    ]


def header_of(block: dict[str, Any]) -> dict[str, Any]:
    """A block answer cut down to what a ``newHeads`` notification carries."""
    return {k: v for k, v in block.items() if k not in _BLOCK_ONLY}


def log_matches(log: dict[str, Any], flt: dict[str, Any]) -> bool:
    """eth_getLogs / logs-subscription filter semantics (address and topics)."""
    address = flt.get("address")
    if address is not None:
        wanted = [address] if isinstance(address, str) else list(address)
        if wanted and log["address"].lower() not in {a.lower() for a in wanted}:
            return False
    topics = flt.get("topics") or []
    for i, want in enumerate(topics):
        if want is None:
            continue
        if i >= len(log["topics"]):
            return False
        options = [want] if isinstance(want, str) else list(want)
        if options and log["topics"][i].lower() not in {t.lower() for t in options}:
            return False
    return True


def block_view(chain: Chain, number: int, full: bool) -> dict[str, Any] | None:
    """Block ``number``, its transactions as hashes or (``full``) as objects."""
    block = chain.block(number)
    if block is None or not full:
        return block
    txs = [
        wallet.answer(
            "eth_getTransactionByHash",
            [tx_hash],
            ledger=chain.ledger,
            head=chain.head,
            block_hash=chain.block_hash,
        )
        for tx_hash in block["transactions"]
    ]
    return block | {"transactions": txs}


def finalized_view(chain: Chain, method: str, params: Any) -> dict[str, Any]:
    """BSC's finality API: the newest block enough validators have voted final.

    ``verifiedValidatorNum`` is how many validators must have signed it (1 to the
    validator count), or -1, -2, -3 for a half, two thirds, or all of them; the
    mock's votes are unanimous, so every valid number names the same block.
    """
    wanted = params[0] if isinstance(params, list) and params else None
    if type(wanted) is not int or not -3 <= wanted <= _VALIDATORS or wanted == 0:
        raise ValueError(f"{wanted} out of range [1,{_VALIDATORS}] (or -1, -2, -3)")
    block = block_view(chain, chain.finalized, bool(params[1:2] and params[1]))
    assert block is not None  # the finalized block is at or under the head
    return header_of(block) if method == FINALITY_METHODS[0] else block
