"""The SVG chart builder: pure, so tested without a server."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gateway.dashboard.charts import bar_chart, nice_ceiling

SVG = "{http://www.w3.org/2000/svg}"


def test_nice_ceiling() -> None:
    cases = {0: 1, 1: 1, 2: 2, 3: 5, 7: 10, 10: 10, 11: 20, 99: 100, 101: 200, 4999: 5000}
    assert {n: nice_ceiling(n) for n in cases} == cases


def test_bars_scale_and_carry_titles() -> None:
    points = [(i * 60_000, n) for i, n in enumerate([0, 5, 10, 0])]
    svg = bar_chart(
        points, title="Requests <per> minute", label=lambda t: f"m{t // 60_000}", tick_every=2
    )
    root = ET.fromstring(str(svg))
    assert root.find(f"{SVG}title").text == "Requests <per> minute"  # type: ignore[union-attr]
    bars = root.findall(f"{SVG}rect")
    assert len(bars) == 2  # zero bars are not drawn
    heights = [float(b.attrib["height"]) for b in bars]
    assert heights[1] == 2 * heights[0]
    titles = [b.find(f"{SVG}title").text for b in bars]  # type: ignore[union-attr]
    assert titles == ["m1: 5 requests", "m2: 10 requests"]
    ticks = [t.text for t in root.findall(f"{SVG}text") if t.text and t.text.startswith("m")]
    assert ticks == ["m0", "m2"]


def test_empty_chart_is_valid_svg() -> None:
    root = ET.fromstring(str(bar_chart([], title="t", label=str, tick_every=1)))
    assert root.tag == f"{SVG}svg"
