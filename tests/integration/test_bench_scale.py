"""``bench scale``: the ideal line, efficiency, the Markdown table and the plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import report as rpt
from bench import verdicts as v
from bench.__main__ import build_parser
from bench.scenarios.scale import default_max_workers


def test_scale_rows_ideal_line_and_efficiency() -> None:
    rows = v.scale_rows({1: 1000.0, 2: 1800.0, 4: 2000.0})
    assert [r["ideal_rps"] for r in rows] == [1000.0, 2000.0, 4000.0]
    assert [r["efficiency"] for r in rows] == [1.0, 0.9, 0.5]
    assert [r["speedup"] for r in rows] == [1.0, 1.8, 2.0]
    # anchored at the smallest count measured, scaled per worker
    assert v.scale_rows({2: 1000.0, 4: 1500.0})[1]["ideal_rps"] == 2000.0
    assert v.scale_rows({}) == []
    assert v.scale_rows({1: 0.0, 2: 5.0})[1]["efficiency"] == 0.0


def test_scale_markdown_and_plot(tmp_path: Path) -> None:
    rows = v.scale_rows({1: 3000.0, 2: 5400.0})
    for row in rows:
        row.update(gateway_cpu_us_per_req=150.0, redis_cpu_us_per_admitted=25.5, at_limit="x")
    report = rpt.new_report("scale", "d", {})
    report["scale"] = {"rows": rows, "server_cpus": 2}
    md = rpt.render_markdown(report)
    assert "## Scaling" in md
    assert "| 2 | 5,400 | 6,000 | 0.90 | 1.80x | 150 | 25.5 | x |" in md
    paths = rpt.write_outputs(report, out_dir=str(tmp_path))
    png = Path(paths["plot"]).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_scale_options() -> None:
    args = build_parser().parse_args(["scale", "--max-workers", "3", "--json"])
    assert args.max_workers == 3 and args.min_efficiency == pytest.approx(0.8)
    assert args.duration == 5.0 and args.json
    assert 1 <= default_max_workers() <= 8


def test_cpu_growth_against_one_worker() -> None:
    rows = v.scale_rows({1: 1000.0, 2: 1500.0, 3: 1600.0})
    for row, us in zip(rows, (100.0, 108.0, 90.0), strict=True):
        row["gateway_cpu_us_per_req"] = us
    assert v.cpu_growth(rows) == pytest.approx({2: 0.08, 3: -0.10})
    rows[0]["gateway_cpu_us_per_req"] = 0.0  # unknown at 1 worker: nothing to judge
    assert v.cpu_growth(rows) is None
    args = build_parser().parse_args(["scale", "--max-cpu-growth", "5%"])
    assert args.max_cpu_growth == pytest.approx(0.05)
    assert build_parser().parse_args(["scale"]).max_cpu_growth == pytest.approx(0.10)
