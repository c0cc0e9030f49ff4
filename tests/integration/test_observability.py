"""The Grafana board and the Prometheus alert rules, checked by the real tools and
against a real ``/metrics`` scrape.

``promtool`` (Debian's ``prometheus`` package) checks the rules file, runs its
unit tests (``deploy/prometheus/alerts.test.yml``) and checks the compose
stack's Prometheus config with the rules loaded; the tests that need it skip,
saying so, where it is missing. Every metric name that a dashboard panel or a
rule queries must appear in the text a running gateway serves on its metrics
listener, with every label the query groups or filters by.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.metrics import METRICS
from tests.helpers.config import Client
from tests.helpers.scrape import scrape

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "deploy" / "grafana" / "dashboards" / "gateway.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus.yml"
METRIC = re.compile(r"\bgateway_[a-z0-9_]+\b")
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
# What the issue asks the board to show, by the metric behind each panel.
BOARD_MUST_SHOW = {
    "gateway_cache_lookups_total": "cache hits",
    "gateway_coalesced_calls_total": "coalescing",
    "gateway_hedges_total": "hedges",
    "gateway_ws_sockets": "WebSocket sockets",
    "gateway_ws_notifications_dropped_total": "dropped notifications",
    "gateway_upstream_head_lag_blocks": "head lag per node",
    "gateway_upstream_latency_seconds_bucket": "upstream latency per node",
    "gateway_transactions_total": "transactions by outcome, route and the private route",
    "gateway_upstream_cordoned": "node state (in rotation, out, inconsistent, cordoned)",
}
ALERTS = {
    "GatewayNetworkAllUpstreamsDown",
    "GatewayUpstreamNodeLagging",
    "GatewayRedisErrors",
    "GatewayHigh5xxRatio",
    "GatewayLimiterFailOpen",
    "GatewayTransactionsNotAnswered",
    "GatewayPrivateRouteFailing",
}


def _promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return exe


def _run(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def _board() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(BOARD.read_text())
    return board


def _board_exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query on the board."""
    return [(p["title"], t["expr"]) for p in _board()["panels"] for t in p["targets"]]


def _rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(r["alert"], r["expr"]) for g in groups for r in g["rules"]]


def _labels_used(expr: str, name: str) -> set[str]:
    """Labels a query reads from ``name``: its selector's matchers and every grouping."""
    used: set[str] = set()
    for selector in re.findall(rf"\b{name}\{{([^}}]*)\}}", expr):
        used |= set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", selector))
    for group in re.findall(r"\b(?:by|without) \(([^)]*)\)", expr):
        used |= {g.strip() for g in group.split(",") if g.strip()}
    return used


# -- the board ---------------------------------------------------------------------------


def test_the_board_picks_its_datasource_by_input() -> None:
    board = _board()
    inputs = {i["name"]: i for i in board["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"  # provisioning resolves it too
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for panel in board["panels"]:
        refs = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
        for ref in refs:
            assert ref == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_the_board_shows_what_an_operator_asks_for() -> None:
    queried = {m for _, expr in _board_exprs() for m in METRIC.findall(expr)}
    missing = {what for name, what in BOARD_MUST_SHOW.items() if name not in queried}
    assert not missing, f"no panel for: {sorted(missing)}"
    per_node = [e for _, e in _board_exprs() if "gateway_upstream_latency_seconds" in e]
    assert per_node and all(
        "node" in _labels_used(e, "gateway_upstream_latency_seconds_bucket") for e in per_node
    )


# -- the alert rules ---------------------------------------------------------------------


def test_the_rules_cover_each_failure() -> None:
    assert {name for name, _ in _rule_exprs()} == ALERTS


def test_promtool_checks_the_rules() -> None:
    out = _run(_promtool(), "check", "rules", str(RULES))
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


def test_promtool_unit_tests_the_rules() -> None:
    out = _run(_promtool(), "test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in out
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == ALERTS, "every alert has a unit test"


def test_promtool_checks_the_compose_prometheus_with_its_rules(tmp_path: Path) -> None:
    """deploy/prometheus.yml as compose mounts it: its rule file resolves to alerts.yml."""
    promtool = _promtool()
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = dict(reversed(v.split(":")[:2]) for v in compose["services"]["prometheus"]["volumes"])
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    files = []
    for path in config["rule_files"]:
        source = ROOT / mounts[path].removeprefix("./")
        assert source == RULES
        files.append(str(source))
    config["rule_files"] = files
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))
    out = _run(promtool, "check", "config", str(copy))
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


# -- against a real scrape ---------------------------------------------------------------


async def _served_names(client: Client, api_key: str) -> dict[str, set[str] | None]:
    """Sample name -> labels seen on it (None: declared in the text but no sample yet)."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": ["0x1", False]}
    for body in (call, call, {**call, "method": "eth_blockNumber", "params": []}):
        resp = await client.post(f"/bsc/{api_key}", json=body)
        assert resp.status == 200, await resp.text()
    await asyncio.sleep(0.5)  # a health probe or two (0.2 s in tests) syncs the intel counters
    status, _, text = await scrape(client.app[METRICS])
    assert status == 200
    names: dict[str, set[str] | None] = {}
    for family in text_string_to_metric_families(text):
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
        }.get(family.type, ("",))
        for suffix in suffixes:
            names.setdefault(family.name + suffix, None)
        for sample in family.samples:
            seen = names.get(sample.name) or set()
            names[sample.name] = seen | set(sample.labels)
    return names


async def test_every_metric_the_board_and_rules_use_is_served(client: Client, api_key: str) -> None:
    names = await _served_names(client, api_key)
    # The calls above produced real samples for the core series.
    for name in (
        "gateway_requests_total",
        "gateway_upstream_latency_seconds_bucket",
        "gateway_upstream_healthy",
        "gateway_cache_lookups_total",
    ):
        assert names.get(name), f"{name}: no sample after real traffic"
    # Labels of declared-but-empty series come from the same app's collectors.
    declared = {
        c._name: set(getattr(c, "_labelnames", ()))  # type: ignore[attr-defined]
        for c in client.app[METRICS].registry._collector_to_names
    }
    problems = []
    for where, expr in [*_board_exprs(), *_rule_exprs()]:
        for name in set(METRIC.findall(expr)):
            if name not in names:
                problems.append(f"{where}: {name} is not in the gateway's /metrics")
                continue
            labels = names[name]
            if labels is None:
                base = re.sub(r"_(total|bucket|sum|count)$", "", name)
                labels = declared.get(base, set()) | ({"le"} if name.endswith("_bucket") else set())
            unknown = _labels_used(expr, name) - labels - TARGET_LABELS
            if unknown:
                problems.append(f"{where}: {name} has no label {sorted(unknown)}")
    assert not problems, "\n".join(problems)


# Panels of counters that exist only after their first event (a rate-limited
# call, a Redis error, a hedge, ...): on a healthy gateway they must show 0,
# not "No data". Title -> (target refId, the samples a healthy gateway gives).
QUIET_PANELS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "Rate-limited / s": ("A", [{"labels": "{}", "value": 0}]),
    "Rate-limited / s by network": (
        "A",
        [{"labels": '{network="bsc"}', "value": 0}, {"labels": '{network="opbnb"}', "value": 0}],
    ),
    "Redis errors / s by policy": ("A", [{"labels": '{policy="none"}', "value": 0}]),
    "Coalesced calls / s": (
        "A",
        [{"labels": '{network="bsc"}', "value": 0}, {"labels": '{network="opbnb"}', "value": 0}],
    ),
    "Hedged reads / s": ("A", [{"labels": '{result="none"}', "value": 0}]),
    "WebSocket notifications / s: delivered and dropped": (
        "B",
        [{"labels": '{reason="none"}', "value": 0}],
    ),
    "Private route: sends no builder took / s": (
        "B",
        [{"labels": '{network="bsc"}', "value": 0}, {"labels": '{network="opbnb"}', "value": 0}],
    ),
}


def test_quiet_panels_show_zero_before_their_first_event(tmp_path: Path) -> None:
    """promtool evaluates the board's own queries over a healthy gateway's series:
    requests flow on both networks, nothing was ever limited, hedged or dropped."""
    promtool = _promtool()
    targets = {
        (p["title"], t["refId"]): t["expr"] for p in _board()["panels"] for t in p["targets"]
    }
    series = [
        {
            "series": f'gateway_requests_total{{network="{net}",method="eth_chainId",'
            f'status="200",instance="gw:9464",job="gateway"}}',
            "values": "0+60x10",
        }
        for net in ("bsc", "opbnb")
    ]
    cases = [
        {
            "expr": targets[(title, ref)].replace("$__rate_interval", "2m"),
            "eval_time": "5m",
            "exp_samples": samples,
        }
        for title, (ref, samples) in QUIET_PANELS.items()
    ]
    rules = tmp_path / "empty.yml"
    rules.write_text("groups: []\n")
    test = tmp_path / "quiet.test.yml"
    test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": cases}],
            }
        )
    )
    out = _run(promtool, "test", "rules", str(test))
    assert "SUCCESS" in out, out


def test_the_node_state_panel_names_each_state(tmp_path: Path) -> None:
    """The state panel's query over four nodes: in rotation, out, inconsistent, cordoned
    (a cordoned node is probed but out of rotation); its value mappings name each."""
    promtool = _promtool()
    (panel,) = [p for p in _board()["panels"] if p["title"].startswith("Upstream node state")]
    states = {"a": (1, 0, 0), "b": (0, 0, 0), "c": (0, 1, 0), "d": (0, 0, 1)}
    series = []
    for node, values in states.items():
        for metric, value in zip(("healthy", "inconsistent", "cordoned"), values, strict=True):
            series.append(
                {
                    "series": f'gateway_upstream_{metric}{{network="bsc",node="{node}",'
                    'instance="gw:9464",job="gateway"}',
                    "values": f"{value}x5",
                }
            )
    want = {"a": 1, "b": 0, "c": 3, "d": 10}
    samples = [{"labels": f'{{network="bsc",node="{n}"}}', "value": v} for n, v in want.items()]
    case = {"expr": panel["targets"][0]["expr"], "eval_time": "2m", "exp_samples": samples}
    rules = tmp_path / "empty.yml"
    rules.write_text("groups: []\n")
    test = tmp_path / "state.test.yml"
    test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [case]}],
            }
        )
    )
    assert "SUCCESS" in _run(promtool, "test", "rules", str(test))
    texts: dict[float, str] = {}
    for mapping in panel["fieldConfig"]["defaults"]["mappings"]:
        if mapping["type"] == "value":
            texts |= {float(k): v["text"] for k, v in mapping["options"].items()}
        else:
            o = mapping["options"]
            texts[float(o["from"])] = o["result"]["text"]
    assert [texts[v] for v in want.values()] == ["in rotation", "out", "inconsistent", "cordoned"]
