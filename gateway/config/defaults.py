"""What a gateway offers before its operator says otherwise: methods, networks, plans.

Plain data (no I/O, no imports of gateway): load.py merges the operator's
tables over these, and validation treats them like any other input.
"""

from __future__ import annotations

from typing import Any

# Methods a public read endpoint offers by default. Everything that signs,
# administers the node or exposes its internals is left out on purpose.
DEFAULT_METHODS: tuple[str, ...] = (
    "eth_blockNumber",
    "eth_call",
    "eth_chainId",
    "eth_estimateGas",
    "eth_feeHistory",
    "eth_gasPrice",
    "eth_getBalance",
    "eth_getBlockByHash",
    "eth_getBlockByNumber",
    "eth_getBlockReceipts",
    "eth_getBlockTransactionCountByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getCode",
    "eth_getLogs",
    "eth_getProof",
    "eth_getStorageAt",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByHash",
    "eth_getTransactionCount",
    "eth_getTransactionReceipt",
    "eth_getUncleByBlockHashAndIndex",
    "eth_getUncleByBlockNumberAndIndex",
    "eth_getUncleCountByBlockHash",
    "eth_getUncleCountByBlockNumber",
    "eth_maxPriorityFeePerGas",
    "eth_protocolVersion",
    "eth_sendRawTransaction",
    "eth_syncing",
    "net_listening",
    "net_peerCount",
    "net_version",
    "web3_clientVersion",
    "web3_sha3",
)

# Prefixes that are never offered, even if an operator lists them: a public
# gateway must not expose node administration or server-side signing.
FORBIDDEN_METHOD_PREFIXES: tuple[str, ...] = (
    "admin_",
    "debug_",
    "personal_",
    "miner_",
    "txpool_",
    "eth_sign",
    "eth_sendTransaction",
)


DEFAULT_NETWORKS: dict[str, dict[str, Any]] = {
    "bsc": {
        "prefix": "/bsc",
        "chain_id": 56,
        "upstreams": [
            "https://bsc-dataseed.bnbchain.org",
            "https://bsc-dataseed-public.bnbchain.org",
        ],
    },
    "opbnb": {
        "prefix": "/opbnb",
        "chain_id": 204,
        "upstreams": [
            "https://opbnb-mainnet-rpc.bnbchain.org",
        ],
    },
}

DEFAULT_PLANS: dict[str, dict[str, Any]] = {
    "free": {"title": "Free", "rate": 25, "burst": 50, "weights": {"eth_getLogs": 50}},
    "payg": {
        "title": "Pay as you go",
        "rate": 300,
        "burst": 600,
        "weights": {"eth_getLogs": 50},
        "price_per_million_cu": 0.5,
    },
}
