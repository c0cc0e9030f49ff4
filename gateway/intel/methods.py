"""What each read method's params mean for routing and caching: block tags, positions.

One table instead of per-module ``if method == ...`` chains, so the cache policy,
the head routing and the coalescer agree on which calls are reads and where the
block a call is about sits in its params.
"""

from __future__ import annotations

import re
from typing import Any, Final

# Block tags Ethereum nodes accept wherever a block number may be given.
TAGS: Final = frozenset({"latest", "safe", "finalized", "earliest", "pending"})

# Reads whose answer depends on the state at a block given at this param index
# (missing = "latest", the nodes' default).
STATE_AT: Final[dict[str, int]] = {
    "eth_getBalance": 1,
    "eth_getCode": 1,
    "eth_getTransactionCount": 1,
    "eth_getStorageAt": 2,
    "eth_call": 1,
    "eth_getProof": 2,
    "eth_createAccessList": 1,
    "eth_simulateV1": 1,
    "eth_getStorageValues": 1,
}

# Reads about one block named by number or tag in param 0.
BLOCK_BY_NUMBER: Final = frozenset(
    {
        "eth_getBlockByNumber",
        "eth_getHeaderByNumber",
        "eth_getBlockTransactionCountByNumber",
        "eth_getBlockReceipts",  # also takes a block hash (EIP-1898 style)
        "eth_getTransactionByBlockNumberAndIndex",
        "eth_getUncleByBlockNumberAndIndex",
        "eth_getUncleCountByBlockNumber",
        # BSC's own reads of one block (a number, a tag, or for sidecars a hash)
        "eth_getBlobSidecars",
        "eth_getTransactionsByBlockNumber",
    }
)

# Reads of an object named by a hash: its content never changes, but whether it
# is on the canonical chain (and so its block number) can until it is final.
BY_HASH: Final = frozenset(
    {
        "eth_getBlockByHash",
        "eth_getHeaderByHash",
        "eth_getTransactionByHash",
        "eth_getTransactionReceipt",
        "eth_getBlockTransactionCountByHash",
        "eth_getTransactionByBlockHashAndIndex",
        "eth_getUncleByBlockHashAndIndex",
        "eth_getUncleCountByBlockHash",
        # BSC's own reads of one transaction
        "eth_getBlobSidecarByTxHash",
        "eth_getTransactionDataAndReceipt",
    }
)

# Answers fixed for the life of a chain.
CONSTANT: Final = frozenset({"eth_chainId", "net_version"})

# Reads that are never cached (they follow the mempool or the node's own
# state) but may still be coalesced and hedged: calling twice changes nothing.
OTHER_READS: Final = frozenset(
    {
        "eth_accounts",
        "eth_baseFee",
        "eth_blobBaseFee",
        "eth_blockNumber",
        "eth_capabilities",  # this node's retention: asked, never kept
        "eth_config",
        "eth_estimateGas",
        "eth_feeHistory",
        "eth_gasPrice",
        "eth_getLogs",
        # BSC's finality API: the finalized block moves with the head.
        "eth_getFinalizedBlock",
        "eth_getFinalizedHeader",
        "eth_maxPriorityFeePerGas",
        "eth_protocolVersion",
        "eth_syncing",
        "net_listening",
        "net_peerCount",
        "web3_clientVersion",
        "web3_sha3",
    }
)

# Every method safe to send twice (hedge, retry after it may have arrived) or to
# share between callers (coalesce). An allowlist on purpose: node-side filter
# calls change node state per call (the gateway answers the filter methods
# itself: gateway/filters), and an operator's ``extra_methods`` are unknown.
READS: Final = frozenset(STATE_AT) | BLOCK_BY_NUMBER | BY_HASH | CONSTANT | OTHER_READS

_HEX_NUMBER: Final = re.compile(r"0x[0-9a-fA-F]{1,64}\Z")
_HASH: Final = re.compile(r"0x[0-9a-fA-F]{64}\Z")


def block_ref(value: Any) -> int | str | None:
    """A block param as a number or a tag; a hash as ``"hash"``; None if malformed.

    Accepts the EIP-1898 object forms (``{"blockNumber": ...}``,
    ``{"blockHash": ...}``) and, leniently, JSON integers.
    """
    if type(value) is str:
        if value in TAGS:
            return value
        if _HEX_NUMBER.match(value):
            return "hash" if len(value) == 66 and _HASH.match(value) else int(value, 16)
        return None
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is dict:
        if "blockHash" in value:
            return "hash" if type(value["blockHash"]) is str else None
        if "blockNumber" in value:
            return block_ref(value["blockNumber"])
    return None


def param(params: Any, index: int, default: Any = None) -> Any:
    """``params[index]`` of a positional params list, else ``default``."""
    if type(params) is list and len(params) > index:
        return params[index]
    return default
