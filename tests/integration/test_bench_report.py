"""Report: summaries from merged results, Markdown rendering, JSON and PNG files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import report as rpt
from bench import verdicts as v
from tests.helpers.benchfakes import fake_result


def steady_events(latency: float, n: int = 1000) -> list[tuple[float, str, float]]:
    return [(i * 0.01, "ok" if i % 100 else "http_502", latency) for i in range(n)]


def test_summarize_headline_figures() -> None:
    res = fake_result(steady_events(0.002), duration=10.0, rate=100.0)
    s = rpt.summarize([res], server_cpu_s=0.5)
    assert s["mode"] == "open-loop" and s["offered_rps"] == 100.0
    assert s["answered"] == 1000 and s["throughput_rps"] == pytest.approx(100.0)
    assert s["ok_rps"] == pytest.approx(99.0)
    assert s["errors"] == {"http_502": 10}
    assert s["error_rate"] == pytest.approx(0.01)
    assert s["latency_ms"]["p50_ms"] == pytest.approx(2.0, rel=1e-3)
    assert s["server_cpu_us_per_req"] == pytest.approx(500.0)
    assert s["generator"]["cpu_pct"] == [25.0]


def test_summarize_merges_rounds() -> None:
    a = fake_result(steady_events(0.001), duration=10.0)
    b = fake_result(steady_events(0.003), duration=10.0)
    s = rpt.summarize([a, b])
    assert s["rounds"] == 2 and s["answered"] == 2000
    assert s["throughput_rps"] == pytest.approx(100.0)
    assert s["round_throughput_rps"] == pytest.approx([100.0, 100.0])
    assert s["latency_ms"]["p50_ms"] == pytest.approx(1.0, rel=1e-3)
    assert s["latency_ms"]["p99_ms"] == pytest.approx(3.0, rel=1e-3)


def test_timeline_rebins() -> None:
    res = fake_result(steady_events(0.001), duration=10.0, step=0.01)
    tl = rpt.timeline(res, step_s=0.5)
    assert tl["step_s"] == pytest.approx(0.5)
    assert sum(tl["rps_by_kind"]["ok"]) * 0.5 == pytest.approx(990)
    assert tl["seconds"][:3] == [0, 1, 2]


def make_report() -> dict[str, object]:
    report = rpt.new_report("steady", "a test run", {"rate": 100})
    gw = rpt.summarize([fake_result(steady_events(0.004))], server_cpu_s=1.0)
    base = rpt.summarize([fake_result(steady_events(0.001))], server_cpu_s=0.5)
    report["targets"] = {"gateway": gw, "proxy": base}
    report["ratios"] = {"gateway/proxy": v.side_by_side_ratios(gw, base)}
    report["figures"] = {"admitted / theoretical": 0.9964, "keys": 3}
    report["verdict"] = v.verdict([v.check("error rate", False, "1% > 0%")])
    report["events"] = [{"t_s": 3.0, "what": "node kill (start)"}]
    report["timeline"] = rpt.timeline(fake_result(steady_events(0.004)))
    return report


@pytest.mark.slow
def test_markdown_has_tables_ratios_verdict() -> None:
    md = rpt.render_markdown(make_report())
    assert "| gateway | open-loop | 100 |" in md
    assert "| p50_ms | 4.00 |" in md  # 4 ms vs 1 ms
    assert "| admitted / theoretical | 0.9964 |" in md
    assert "## Verdict: FAIL" in md and "- FAIL error rate: 1% > 0%" in md
    assert "| gateway | http_502 | 10 |" in md
    assert "t=3.000 s: node kill (start)" in md


@pytest.mark.slow
def test_write_outputs_writes_json_markdown_and_png(tmp_path: Path) -> None:
    report = make_report()
    paths = rpt.write_outputs(report, out_dir=str(tmp_path))
    assert set(paths) == {"json", "markdown", "plot"}
    data = json.loads(Path(paths["json"]).read_text())
    assert data["targets"]["gateway"]["answered"] == 1000
    assert Path(paths["markdown"]).read_text().startswith("# bench steady")
    png = Path(paths["plot"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_generator_notes() -> None:
    notes = rpt.generator_notes({"gateway": {"generator": {"cpu_pct": [97.0], "lag_p99_ms": 12.0}}})
    assert len(notes) == 2 and "bottleneck" in notes[0]
    assert rpt.generator_notes({"gateway": {"generator": {"cpu_pct": [40.0]}}}) == []
