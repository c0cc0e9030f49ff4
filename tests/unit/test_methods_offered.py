"""The methods offered: the default lists, operator patterns with weights, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.rpc import protocol as rpc
from gateway.server.workers import config_to_raw

HOSTED_READS = (
    "eth_blobBaseFee",
    "eth_createAccessList",
    "eth_simulateV1",
    "eth_getHeaderByNumber",
    "eth_getHeaderByHash",
    "eth_newFilter",
    "eth_newBlockFilter",
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_uninstallFilter",
    "eth_getBlockReceipts",
    "eth_getProof",
    "eth_feeHistory",
    # every eth_ method of the execution-apis test suite
    "eth_baseFee",
    "eth_capabilities",
    "eth_config",
    "eth_getStorageValues",
)
BSC_FINALITY = ("eth_getFinalizedHeader", "eth_getFinalizedBlock", "eth_newFinalizedHeaderFilter")


def test_default_lists_hold_the_hosted_reads_and_bsc_finality_on_bsc_only() -> None:
    cfg = config_from_dict({})
    bsc, opbnb = cfg.network("bsc").methods, cfg.network("opbnb").methods
    for method in HOSTED_READS:
        assert method in bsc and method in opbnb, method
    for method in BSC_FINALITY:
        assert method in bsc and method not in opbnb, method
    for method in ("eth_newPendingTransactionFilter", "debug_traceTransaction", "eth_sign"):
        assert method not in bsc and method not in opbnb


# NodeReal's compute-unit table in proportion (its price / its eth_call's 20,
# rounded up): the figures docs/METHODS.md names, and a plain read is the unit.
NODEREAL_IN_PROPORTION = {
    "eth_call": 1,
    "eth_getBalance": 1,
    "eth_blockNumber": 1,
    "eth_getLogs": 3,
    "eth_getFilterLogs": 3,
    "eth_getFilterChanges": 1,
    "eth_newFilter": 1,
    "eth_newBlockFilter": 1,
    "eth_newFinalizedHeaderFilter": 1,
    "eth_uninstallFilter": 1,
    "eth_estimateGas": 4,
    "eth_sendRawTransaction": 8,
    "debug_traceTransaction": 14,
    "debug_traceCall": 14,
    "debug_traceBlockByNumber": 90,
    "debug_traceBlockByHash": 90,
}


def test_default_weights_are_nodereals_table_in_proportion() -> None:
    """Before: eth_getLogs and both polls 50, filter creation 10 (a listener took half
    of the free plan); now a poll costs what a hosted endpoint charges, relatively."""
    cfg = config_from_dict({"networks": {"bsc": {"extra_methods": ["debug_trace*"]}}})
    for plan in cfg.plans:
        got = {m: plan.cost(m) for m in NODEREAL_IN_PROPORTION}
        assert got == NODEREAL_IN_PROPORTION, plan.name
    free = cfg.plan("free")
    assert (free.rate, free.burst) == (25, 50)  # plan numbers unchanged
    # one ethers contract.on listener polling every 4 s: a small share of the free plan
    assert free.cost("eth_getFilterChanges") / 4 < free.rate / 20


def test_every_weight_is_listed_in_methods_md_with_its_source() -> None:
    from gateway.config.defaults import DEFAULT_WEIGHTS

    text = (Path(__file__).parents[2] / "docs" / "METHODS.md").read_text()
    table = text[text.index("## Weights") :]
    for method, units in DEFAULT_WEIGHTS.items():
        row = next((ln for ln in table.splitlines() if f"`{method}`" in ln), None)
        assert row is not None, method
        assert f"| {units} |" in row, (method, row)


def test_traces_offered_by_name_only_cost_what_nodereal_charges_for_them() -> None:
    """``extra_methods = ["debug_trace*", "trace_*"]`` (no weights given): not 1 unit."""
    cfg = config_from_dict({"networks": {"bsc": {"extra_methods": ["debug_trace*", "trace_*"]}}})
    free = cfg.plan("free")
    assert free.cost("debug_traceTransaction") == free.cost("trace_transaction") == 14
    assert free.cost("debug_traceBlockByNumber") == free.cost("trace_block") == 90


def test_filter_logs_cost_what_the_plans_own_eth_getlogs_costs_and_a_poll_its_own() -> None:
    cfg = config_from_dict(
        {
            "plans": {
                "payg": {"rate": 300, "weights": {"eth_getLogs": 200}},
                "free": {"rate": 25, "weights": {"eth_getLogs": 80, "eth_getFilterLogs": 90}},
            }
        }
    )
    payg, free = cfg.plan("payg"), cfg.plan("free")
    assert payg.cost("eth_getFilterLogs") == 200 and payg.cost("eth_getFilterChanges") == 1
    assert free.cost("eth_getFilterLogs") == 90 and free.cost("eth_getFilterChanges") == 1


@pytest.mark.parametrize("method", ["eth_getFilterChanges", "eth_getFilterLogs", "eth_getLogs"])
def test_a_plan_may_not_make_a_log_scan_free(method: str) -> None:
    with pytest.raises(ConfigError, match=rf"^plans\.free\.weights\.{method}: .*never free"):
        config_from_dict({"plans": {"free": {"rate": 25, "weights": {method: 0}}}})


def test_operator_offers_a_pattern_with_a_weight_and_plans_may_override_it() -> None:
    cfg = config_from_dict(
        {
            "networks": {"bsc": {"extra_methods": {"debug_trace*": 500, "txpool_status": 10}}},
            "plans": {"payg": {"rate": 300, "weights": {"debug_traceCall": 200}}},
            "filters": {"ttl_s": 60.0, "max_per_key": 7},
        }
    )
    bsc = cfg.network("bsc").methods
    assert "debug_traceTransaction" in bsc and "debug_traceBlockByNumber" in bsc
    assert "txpool_status" in bsc and "txpool_content" not in bsc
    assert "debug_traceTransaction" not in cfg.network("opbnb").methods  # per network
    free, payg = cfg.plan("free"), cfg.plan("payg")
    assert free.cost("debug_traceTransaction") == 500 and free.cost("txpool_status") == 10
    assert payg.cost("debug_traceCall") == 200 and payg.cost("debug_traceTransaction") == 500
    assert payg.cost("eth_getLogs") == 3  # the plan's own weights lay over the shipped ones
    # the pattern is understood by the request path's validation
    call = rpc.validate_call(
        {"jsonrpc": "2.0", "id": 1, "method": "debug_traceTransaction", "params": []}, bsc
    )
    assert call.error is None
    # and survives the hand-over to worker processes, and the WS path's union
    assert "debug_traceCall" in (bsc | {"eth_subscribe"})
    raw = orjson.loads(orjson.dumps(config_to_raw(cfg)))
    again = config_from_dict(raw)
    assert again == cfg and "debug_traceCall" in again.network("bsc").methods
    assert again.filters.max_per_key == 7  # the [filters] section reaches the workers
    assert again.plan("free").cost("debug_traceTransaction") == 500


@pytest.mark.parametrize(
    "extra,path",
    [
        (["admin_peers"], "networks.bsc.extra_methods[0]"),
        (["eth_sendTransaction"], "networks.bsc.extra_methods[0]"),
        (["eth_signTypedData_v4"], "networks.bsc.extra_methods[0]"),
        (["engine_newPayloadV3"], "networks.bsc.extra_methods[0]"),
        (["eth_call", "personal_*"], "networks.bsc.extra_methods[1]"),
        (["eth_*"], "networks.bsc.extra_methods[0]"),  # would reach eth_sign
        (["debug_*"], "networks.bsc.extra_methods[0]"),  # would reach debug_setHead
        (["debug_setHead"], "networks.bsc.extra_methods[0]"),
        (["Admin_peers"], "networks.bsc.extra_methods[0]"),  # any spelling
        (["DEBUG_SETHEAD"], "networks.bsc.extra_methods[0]"),
        (["Personal_*"], "networks.bsc.extra_methods[0]"),
        (["debug_setMemoryLimit"], "networks.bsc.extra_methods[0]"),  # node settings
        (["debug_standardTraceBlockToFile"], "networks.bsc.extra_methods[0]"),  # writes files
        (["debug_standard*"], "networks.bsc.extra_methods[0]"),
        (["eth_newPendingTransactionFilter"], "networks.bsc.extra_methods[0]"),
        (["debug_traceBlockFromFile"], "networks.bsc.extra_methods[0]"),  # reads a file
        (["eth_call", "Debug_TraceBadBlockFromFile"], "networks.bsc.extra_methods[1]"),
        (["debug_traceBlockF*"], "networks.bsc.extra_methods[0]"),  # aimed at the file reader
        (["debug_traceBlockFromFi*"], "networks.bsc.extra_methods[0]"),
        (["trace_xToFile*"], "networks.bsc.extra_methods[0]"),
        ({"debug_traceBlockFrom*": 90}, "networks.bsc.extra_methods.debug_traceBlockFrom*"),
        (["*"], "networks.bsc.extra_methods[0]"),
        ([""], "networks.bsc.extra_methods[0]"),
        ({"miner_*": 1}, "networks.bsc.extra_methods.miner_*"),
        ({"debug_trace*": -1}, "networks.bsc.extra_methods.debug_trace*"),
    ],
)
def test_never_offerable_methods_are_refused_at_load(extra: Any, path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"networks": {"bsc": {"extra_methods": extra}}})
    assert str(exc.value).startswith(path + ":"), exc.value


def test_no_pattern_offers_a_method_that_reads_or_writes_a_callers_file() -> None:
    """Before: ``debug_trace*`` also offered geth's ``debug_traceBlockFromFile``."""
    cfg = config_from_dict(
        {"networks": {"bsc": {"extra_methods": ["debug_trace*", "debug_traceBlock*", "trace_*"]}}}
    )
    bsc = cfg.network("bsc").methods
    assert "debug_traceBlockByNumber" in bsc and "debug_traceTransaction" in bsc
    for name in (
        "debug_traceBlockFromFile",
        "debug_traceBadBlockFromFile",
        "debug_traceblockfromfile",
        "debug_traceCallToFile",
        "trace_replayToFILE",
    ):
        assert name not in bsc, name
        assert name not in (bsc | {"eth_subscribe"}), name  # the WebSocket path's union too
        call = rpc.validate_call({"jsonrpc": "2.0", "id": 1, "method": name, "params": []}, bsc)
        assert rpc.call_error_obj(call)["error"]["code"] == -32601


def test_config_check_names_the_path_of_a_file_method(tmp_path: Path) -> None:
    """What ``gateway config check FILE`` prints: the path, and why."""
    from gateway.cli.configcheck import check

    conf = tmp_path / "gw.toml"
    conf.write_text(
        '[networks.bsc]\nextra_methods = ["debug_trace*", "debug_traceBlockFromFile"]\n'
    )
    cfg, problems = check(str(conf), env={})
    assert cfg is None and len(problems) == 1
    assert problems[0].startswith("networks.bsc.extra_methods[1]: 'debug_traceBlockFromFile'")
    assert "file the caller names" in problems[0]


def test_methods_list_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"^networks\.opbnb\.methods\[1\]: 'admin_peers'"):
        config_from_dict({"networks": {"opbnb": {"methods": ["eth_call", "admin_peers"]}}})


def test_two_networks_giving_one_pattern_two_weights_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^networks\.opbnb\.extra_methods\.trace_\*: weight 300"):
        config_from_dict(
            {
                "networks": {
                    "bsc": {"extra_methods": {"trace_*": 500}},
                    "opbnb": {"extra_methods": {"trace_*": 300}},
                }
            }
        )


def test_not_offered_uses_geths_words_with_the_name_cut_at_64() -> None:
    methods = config_from_dict({}).network("bsc").methods
    long_name = "eth_" + "x" * 100
    for name, shown in (("eth_nonexistent", "eth_nonexistent"), (long_name, long_name[:64])):
        call = rpc.validate_call({"jsonrpc": "2.0", "id": 3, "method": name}, methods)
        obj = rpc.call_error_obj(call)
        assert obj["error"] == {
            "code": -32601,
            "message": f"the method {shown} does not exist/is not available",
        }
    assert (
        rpc.FILTER_NOT_FOUND.code == -32000 and rpc.FILTER_NOT_FOUND.message == "filter not found"
    )
