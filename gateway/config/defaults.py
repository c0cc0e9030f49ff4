"""What a gateway offers before its operator says otherwise: methods, networks, plans.

Plain data (no I/O, no imports of gateway): load.py merges the operator's
tables over these, and validation treats them like any other input.
"""

from __future__ import annotations

from typing import Any

# Methods a public read endpoint offers by default:
# every read a hosted provider serves, forwarded even where a particular node
# refuses one (its own answer then comes back), plus the filter methods the
# gateway answers itself (gateway/filters). Everything that signs, administers
# the node or exposes its internals is left out on purpose.
DEFAULT_METHODS: tuple[str, ...] = (
    "eth_accounts",
    "eth_baseFee",
    "eth_blobBaseFee",
    "eth_blockNumber",
    "eth_call",
    "eth_capabilities",
    "eth_chainId",
    "eth_config",
    "eth_createAccessList",
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
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_getHeaderByHash",
    "eth_getHeaderByNumber",
    "eth_getLogs",
    "eth_getProof",
    "eth_getStorageAt",
    "eth_getStorageValues",
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
    "eth_newBlockFilter",
    "eth_newFilter",
    "eth_protocolVersion",
    "eth_sendRawTransaction",
    "eth_simulateV1",
    "eth_syncing",
    "eth_uninstallFilter",
    "net_listening",
    "net_peerCount",
    "net_version",
    "web3_clientVersion",
    "web3_sha3",
)

# BSC's finality API (BSC docs, "Finality API") and BSC's own reads (BSC docs,
# "BSC API list"), in the default list of a network whose chain is BSC
# (mainnet 56, testnet 97).
BSC_CHAIN_IDS: frozenset[int] = frozenset({56, 97})
BSC_METHODS: tuple[str, ...] = (
    "eth_getFinalizedBlock",
    "eth_getFinalizedHeader",
    "eth_newFinalizedHeaderFilter",
    "eth_getBlobSidecars",
    "eth_getBlobSidecarByTxHash",
    "eth_getTransactionsByBlockNumber",
    "eth_getTransactionDataAndReceipt",
    # BSC's conditional send (account-abstraction bundlers): answered by the
    # gateway's transaction path, as eth_sendRawTransaction is
    "eth_sendRawTransactionConditional",
)

# Prefixes that are never offered, whatever the config says:
# node administration and server-side signing. A configured pattern that
# could reach one of them ("eth_*", "*") is refused too.
FORBIDDEN_METHOD_PREFIXES: tuple[str, ...] = (
    "admin_",
    "personal_",
    "miner_",
    "engine_",
    "eth_sign",
    "eth_sendTransaction",
)

# debug_ methods that change or stop the node, or hand out its memory and
# profiles: an operator may offer ``debug_trace*`` but never these (a
# ``debug_*`` pattern is refused since it would reach them).
FORBIDDEN_DEBUG_METHODS: tuple[str, ...] = (
    "debug_backtraceAt",
    "debug_blockProfile",
    "debug_chaindbCompact",
    "debug_chaindbProperty",
    "debug_cpuProfile",
    "debug_dbAncient",
    "debug_dbAncients",
    "debug_dbGet",
    "debug_freeOSMemory",
    "debug_gcStats",
    "debug_goTrace",
    "debug_memStats",
    "debug_mutexProfile",
    "debug_setBlockProfileRate",
    "debug_setGCPercent",
    "debug_setHead",
    "debug_setMemoryLimit",
    "debug_setMutexProfileFraction",
    "debug_setTrieFlushInterval",
    "debug_stacks",
    "debug_standardTraceBadBlockToFile",
    "debug_standardTraceBlockToFile",
    "debug_startCPUProfile",
    "debug_startGoTrace",
    "debug_stopCPUProfile",
    "debug_stopGoTrace",
    "debug_verbosity",
    "debug_vmodule",
    "debug_writeBlockProfile",
    "debug_writeMemProfile",
    "debug_writeMutexProfile",
)

# Methods that make a node read or write a file the caller names (geth's
# debug_traceBlockFromFile opens any path on the node's disk, and its errors
# tell whether the path exists). Never offered: an exact name is refused at
# load, a pattern aimed at one is refused too, and every pattern skips them
# at run time (methodset.FILE_SUFFIXES: any name ending in FromFile/ToFile).
FILE_METHODS: tuple[str, ...] = (
    "debug_standardTraceBadBlockToFile",
    "debug_standardTraceBlockToFile",
    "debug_traceBadBlockFromFile",
    "debug_traceBlockFromFile",
)

# Not offered: the gateway keeps filters itself and keeps no mempool view;
# newPendingTransactions over WebSocket is the way to follow it.
UNOFFERED_METHODS: tuple[str, ...] = ("eth_newPendingTransactionFilter",)

# Compute units per call: NodeReal's published compute-unit table (BSC's main
# hosted provider) in proportion, each price divided by its eth_call (20) and
# rounded up, so a plain read is 1 and a plan's rate reads as plain calls per
# second. A method that table lacks is priced beside its nearest neighbour
# there; docs/METHODS.md gives every weight with its source. Methods not
# listed cost 1; each plan's ``weights`` lays over this; an exact name wins
# over a ``prefix*`` pattern.
DEFAULT_WEIGHTS: dict[str, int] = {
    "debug_trace*": 90,  # debug_traceBlock*
    "debug_traceCall": 14,
    "debug_traceTransaction": 14,
    "eth_createAccessList": 4,  # not in the table: beside eth_estimateGas
    "eth_estimateGas": 4,
    "eth_getFilterChanges": 1,
    "eth_getFilterLogs": 3,
    "eth_getLogs": 3,
    "eth_getTransactionDataAndReceipt": 2,  # BSC's: a transaction and its receipt
    "eth_newBlockFilter": 1,
    "eth_newFilter": 1,
    "eth_newFinalizedHeaderFilter": 1,
    "eth_sendRawTransaction": 8,
    "eth_sendRawTransactionConditional": 8,  # BSC's: a raw transaction and its conditions
    "eth_sendPrivateTransaction": 8,  # a raw transaction for the private route only
    # Bundles (offered only with private_tx endpoints): not in the table;
    # twice eth_sendRawTransaction (several transactions for every builder).
    "eth_sendBundle": 16,
    "eth_simulateV1": 14,  # not in the table: beside debug_traceCall
    "trace_*": 90,  # not in the table: beside debug_traceBlock*
    "trace_call": 14,  # beside debug_traceCall
    "trace_transaction": 14,  # beside debug_traceTransaction
}


DEFAULT_NETWORKS: dict[str, dict[str, Any]] = {
    "bsc": {
        "prefix": "/bsc",
        "chain_id": 56,
        "upstreams": [
            "https://bsc-dataseed.bnbchain.org",
            "https://bsc-dataseed-public.bnbchain.org",
        ],
        # a block every 0.45 s since the Fermi upgrade
        "block_time_s": 0.45,
    },
    "opbnb": {
        "prefix": "/opbnb",
        "chain_id": 204,
        "upstreams": [
            "https://opbnb-mainnet-rpc.bnbchain.org",
        ],
        # 0.5 s today, 0.25 s after the Fourier upgrade: the faster one, since a
        # value above the real interval would take honest nodes out of rotation
        "block_time_s": 0.25,
    },
}

DEFAULT_PLANS: dict[str, dict[str, Any]] = {
    "free": {"title": "Free", "rate": 25, "burst": 50},
    "payg": {
        "title": "Pay as you go",
        "rate": 300,
        "burst": 600,
        "price_per_million_cu": 0.5,
    },
}
