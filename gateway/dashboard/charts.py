"""Server-rendered SVG bar charts: no JavaScript, no chart library.

Pure functions of the numbers, so they are tested without a browser. Each
bar carries a ``<title>`` (the browser shows it on hover, screen readers
read it); the page also offers the same numbers as a table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

WIDTH = 720
HEIGHT = 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 8, 10, 26


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is >= ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power: int = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def bar_chart(
    points: Sequence[tuple[int, int]],
    *,
    title: str,
    label: Callable[[int], str],
    tick_every: int,
    chart_id: str = "usage-chart",
) -> Markup:
    """An SVG of ``(start ms, count)`` bars, oldest first, with ``title`` for readers.

    ``label`` turns a bar's start into text (x ticks and hover titles);
    every ``tick_every``-th bar gets an x tick.
    """
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    top = nice_ceiling(max((n for _, n in points), default=0))
    slot = plot_w / max(1, len(points))
    gap = min(2.0, slot * 0.2)
    parts = [
        f'<svg class="chart" id="{chart_id}" role="img" aria-labelledby="{chart_id}-title" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="xMidYMid meet" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-title">{escape(title)}</title>',
    ]
    for value in sorted({0, top // 2, top}):  # whole numbers only: requests are counted
        y = _TOP + plot_h * (1 - value / top)
        text = f"{value:,}"
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" '
            f'y1="{y:.1f}" y2="{y:.1f}" stroke="#d0d7de" stroke-width="1"/>'
        )
        parts.append(
            f'<text class="axis" x="{_LEFT - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end" font-size="11">{text}</text>'
        )
    for i, (start, count) in enumerate(points):
        x = _LEFT + i * slot + gap / 2
        if count:
            h = max(1.0, plot_h * count / top)
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{_TOP + plot_h - h:.1f}" '
                f'width="{max(0.5, slot - gap):.1f}" height="{h:.1f}" fill="#1f6feb">'
                f"<title>{escape(label(start))}: {count:,} requests</title></rect>"
            )
        if tick_every and i % tick_every == 0:
            parts.append(
                f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" font-size="11">'
                f"{escape(label(start))}</text>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))
