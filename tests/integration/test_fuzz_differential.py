"""Differential: a real EVM node (Hardhat, chain 56) asked directly and through the gateway.

Hypothesis generates calls of every offered read with plausible and
implausible params; each goes straight to Hardhat, then through the gateway
twice (the second is served by the cache or joins a coalesced flight). The
three answers must match, except for the refusals listed in ``REFUSALS``:
places where the gateway answers itself on purpose, each with its reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.config import Config
from tests.helpers.config import MakeConfig
from tests.helpers.hardhat import hardhat  # noqa: F401  (the session's node)
from tests.helpers.served import Served, served

pytestmark = pytest.mark.slow

# Hardhat's first default account (funded) and the zero address.
RICH = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
ZERO = "0x" + "00" * 20

# Not generated: a call that changes the node's state would make the two
# paths see different chains (the differential needs a fixed one).
# The filter methods are answered by the gateway itself (its own
# 128-bit ids, state in Redis), so their answers differ from a node's by
# design; tests/integration/test_filters.py and test_filter_clients.py (real
# clients against this Hardhat) cover them.
NOT_GENERATED = {
    "eth_sendRawTransaction",
    "eth_sendRawTransactionConditional",
    "eth_sendPrivateTransaction",
    "eth_sendBundle",
    "eth_newFilter",
    "eth_newBlockFilter",
    "eth_newFinalizedHeaderFilter",
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_uninstallFilter",
}


def _logs_range_guard(method: str, params: Any, direct: dict[str, Any], gw: dict[str, Any]) -> bool:
    """eth_getLogs over more blocks than ``limits.max_logs_range``: the gateway refuses
    with -32602 before the node is asked; the node would scan."""
    err = gw.get("error") or {}
    return method == "eth_getLogs" and err.get("code") == -32602


def _own_params_check(method: str, params: Any, direct: dict[str, Any], gw: dict[str, Any]) -> bool:
    """Both refuse the params with the same code; the gateway says it in its own
    words (it reads params the way geth does before forwarding, Hardhat's
    validator words it differently). The refusal must agree, not the text."""
    d, g = direct.get("error"), gw.get("error")
    return d is not None and g is not None and d.get("code") == g.get("code")


def _null_filter_as_geth(
    method: str, params: Any, direct: dict[str, Any], gw: dict[str, Any]
) -> bool:
    """``eth_getLogs(null)``: geth decodes null into an empty filter (the latest
    block's logs), and the gateway forwards that rebuild (docs/PARAMS.md);
    Hardhat refuses null. The gateway keeps geth's reading."""
    return method == "eth_getLogs" and params == [None] and "error" in direct and "result" in gw


def _upper_0x_block_as_geth(
    method: str, params: Any, direct: dict[str, Any], gw: dict[str, Any]
) -> bool:
    """A ``0X``-prefixed block number in a filter: geth's hexutil reads it, and the
    gateway forwards it as lower-case ``0x`` (docs/PARAMS.md); Hardhat refuses it.
    Addresses and other values keep their spelling (the 0X cache test below)."""
    filt = params[0] if type(params) is list and params and type(params[0]) is dict else {}
    blocks = [filt.get(k) for k in ("fromBlock", "toBlock")]
    return (
        method == "eth_getLogs"
        and any(type(b) is str and b.startswith("0X") for b in blocks)
        and "error" in direct
        and "error" not in gw
    )


REFUSALS: dict[str, Callable[[str, Any, dict[str, Any], dict[str, Any]], bool]] = {
    "a 0X block number in a filter read as geth reads it": _upper_0x_block_as_geth,
    "eth_getLogs block range over the gateway's limit": _logs_range_guard,
    "eth_getLogs(null) read as geth reads it (the empty filter)": _null_filter_as_geth,
    "both refuse the params, in different words": _own_params_check,
}

hexes = st.integers(0, 2**64).map(hex)
addresses = st.sampled_from([RICH, ZERO, RICH.lower(), "0X" + RICH[2:], "0x1234", ""]) | st.binary(
    min_size=20, max_size=20
).map(lambda b: "0x" + b.hex())
hashes = st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex()) | st.sampled_from(
    ["0x00", "0x" + "00" * 32]
)
tags = (
    st.sampled_from(
        [
            "latest",
            "earliest",
            "pending",
            "safe",
            "finalized",
            "0x0",
            "0x1",
            "0x00",
            "0X0",
            "Latest",
        ]
    )
    | hexes
    | st.integers(0, 3)
)
block_refs = tags | st.fixed_dictionaries({"blockNumber": st.sampled_from(["0x0", "latest"])})
call_objects = st.fixed_dictionaries(
    {"to": addresses},
    optional={
        "from": addresses,
        "data": st.sampled_from(["0x", "0x70a08231", "0x12"]),
        "value": st.sampled_from(["0x0", "0x1"]),
        "gas": st.sampled_from(["0x5208", "0x0"]),
    },
)
log_filters = st.fixed_dictionaries(
    {},
    optional={
        "fromBlock": tags,
        "toBlock": tags,
        "address": addresses | st.lists(addresses, max_size=2),
        "topics": st.lists(st.none() | hashes, max_size=2),
        "blockHash": hashes,
    },
)
junk = st.none() | st.booleans() | st.integers() | st.text(max_size=5)

PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "eth_getBalance": st.tuples(addresses, block_refs),
    "eth_getCode": st.tuples(addresses, block_refs),
    "eth_getTransactionCount": st.tuples(addresses, block_refs),
    "eth_getStorageAt": st.tuples(addresses, hexes, block_refs),
    "eth_getProof": st.tuples(addresses, st.lists(hashes, max_size=2), block_refs),
    "eth_call": st.tuples(call_objects, block_refs),
    "eth_estimateGas": st.tuples(call_objects),
    "eth_getBlockByNumber": st.tuples(tags, st.booleans()),
    "eth_getBlockByHash": st.tuples(hashes, st.booleans()),
    "eth_getBlockReceipts": st.tuples(tags),
    "eth_getBlockTransactionCountByNumber": st.tuples(tags),
    "eth_getBlockTransactionCountByHash": st.tuples(hashes),
    "eth_getTransactionByHash": st.tuples(hashes),
    "eth_getTransactionReceipt": st.tuples(hashes),
    "eth_getTransactionByBlockNumberAndIndex": st.tuples(tags, hexes),
    "eth_getTransactionByBlockHashAndIndex": st.tuples(hashes, hexes),
    "eth_getUncleByBlockNumberAndIndex": st.tuples(tags, hexes),
    "eth_getUncleByBlockHashAndIndex": st.tuples(hashes, hexes),
    "eth_getUncleCountByBlockNumber": st.tuples(tags),
    "eth_getUncleCountByBlockHash": st.tuples(hashes),
    "eth_getLogs": st.tuples(log_filters),
    "eth_feeHistory": st.tuples(
        st.integers(1, 4) | hexes, tags, st.lists(st.integers(0, 100), max_size=2)
    ),
    "web3_sha3": st.tuples(st.sampled_from(["0x", "0x68656c6c6f", "hello"])),
    "eth_createAccessList": st.tuples(call_objects, block_refs),
    "eth_simulateV1": st.tuples(
        st.fixed_dictionaries(
            {
                "blockStateCalls": st.lists(
                    st.fixed_dictionaries({"calls": st.lists(call_objects, max_size=2)}),
                    max_size=2,
                )
            }
        ),
        block_refs,
    ),
    "eth_getHeaderByNumber": st.tuples(tags),
    "eth_getHeaderByHash": st.tuples(hashes),
    "eth_getStorageValues": st.tuples(
        st.dictionaries(addresses, st.lists(hashes, max_size=2), max_size=2), block_refs
    ),
    # BSC's finality API: (verified validators, full transactions?)
    "eth_getFinalizedHeader": st.tuples(st.integers(-1, 30)),
    "eth_getFinalizedBlock": st.tuples(st.integers(-1, 30), st.booleans()),
    # BSC's own reads (Hardhat refuses them: both paths must agree on that)
    "eth_getBlobSidecars": st.tuples(tags | hashes),
    "eth_getBlobSidecarByTxHash": st.tuples(hashes),
    "eth_getTransactionsByBlockNumber": st.tuples(tags),
    "eth_getTransactionDataAndReceipt": st.tuples(hashes),
}


@st.composite
def calls(draw: st.DrawFn, methods: list[str]) -> tuple[str, list[Any]]:
    method = draw(st.sampled_from(methods))
    shaped = PARAMS.get(method, st.just(()))
    if draw(st.integers(0, 9)) == 0:  # one in ten: params of no shape at all
        return method, draw(st.lists(junk, max_size=3))
    params = list(draw(shaped))
    return method, params


# The suite's budget, or scripts/fuzz's (FUZZ_RANDOM=1, FUZZ_EXAMPLES=N): as in
# test_fuzz_gateway.py.
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "0")) or 150,
    deadline=None,
    derandomize=os.environ.get("FUZZ_RANDOM") != "1",
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def diff_config(make_config: MakeConfig, hardhat: str) -> Config:  # noqa: F811
    return make_config(
        {
            "server": {"metrics_listen": ""},
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            # Hardhat keeps every block's state: an archive node in the node table
            "networks": {"bsc": {"upstreams": [{"url": hardhat, "archive": True}]}},
        },
    )


@pytest.fixture
async def gw(diff_config: Config) -> AsyncIterator[Served]:
    async with served(diff_config) as s:
        yield s


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def offered(cfg: Config) -> list[str]:
    bsc = next(n for n in cfg.networks if n.name == "bsc")
    return sorted(set(bsc.methods) - NOT_GENERATED)


async def _post(session: aiohttp.ClientSession, url: str, call: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url, json=call) as resp:
        answer: dict[str, Any] = json.loads(await resp.read())
        return answer


def _refusal(method: str, params: Any, direct: dict[str, Any], gw: dict[str, Any]) -> str | None:
    for reason, applies in REFUSALS.items():
        if applies(method, params, direct, gw):
            return reason
    return None


@given(data=st.data())
@FUZZ
async def test_gateway_answers_as_the_node_does(
    gw: Served,
    session: aiohttp.ClientSession,
    api_key: str,
    hardhat: str,  # noqa: F811
    diff_config: Config,
    data: st.DataObject,
) -> None:
    method, params = data.draw(calls(offered(diff_config)))
    call = {"jsonrpc": "2.0", "id": 42, "method": method, "params": params}
    direct = await _post(session, hardhat, call)
    event("node answered " + ("an error" if "error" in direct else "a result"))
    for attempt in ("first", "second (cache / coalescing)"):
        through = await _post(session, f"{gw.url}/bsc/{api_key}", call)
        assert through["id"] == 42
        if through == direct:
            continue
        reason = _refusal(method, params, direct, through)
        event(f"refusal: {reason}")
        assert reason is not None, f"{attempt}: {call}\n direct: {direct}\n gateway: {through}"


async def test_differential_covers_every_offered_read(diff_config: Config) -> None:
    """A new offered method without a params shape is still called (with generic params),
    but the shapes are what find real differences: keep them in step."""
    shapeless = {
        m
        for m in offered(diff_config)
        if m not in PARAMS
        and m
        not in {
            "eth_blockNumber",
            "eth_chainId",
            "eth_gasPrice",
            "eth_maxPriorityFeePerGas",
            "eth_protocolVersion",
            "eth_syncing",
            "net_listening",
            "net_peerCount",
            "net_version",
            "web3_clientVersion",
            "eth_blobBaseFee",
            "eth_accounts",
            "eth_baseFee",
            "eth_capabilities",
            "eth_config",
        }
    }
    assert not shapeless, f"give these a params strategy in PARAMS: {sorted(shapeless)}"


# -- findings of the differential, kept as plain tests --------------------------------
@pytest.mark.parametrize("method", ["eth_getCode", "eth_getBalance"])
async def test_0X_prefix_is_not_answered_from_the_0x_cache(
    gw: Served,
    session: aiohttp.ClientSession,
    api_key: str,
    hardhat: str,  # noqa: F811
    method: str,
) -> None:
    """Found by ``scripts/fuzz`` (seed 449103306): Hardhat refuses ``0X``, the gateway
    answered it with the cached result of the ``0x`` call."""
    url = f"{gw.url}/bsc/{api_key}"
    lower = {"jsonrpc": "2.0", "id": 1, "method": method, "params": [RICH.lower(), "latest"]}
    upper = dict(lower, params=["0X" + RICH[2:], "latest"])
    assert await _post(session, url, lower) == await _post(session, hardhat, lower)
    direct = await _post(session, hardhat, upper)
    assert "error" in direct  # the node tells them apart
    assert await _post(session, url, upper) == direct
