"""The PNG of a bench report: the latency spectrum per target, the timeline of
outcomes, throughput against workers, or (``bench soak``) each sampled series
over time. Reads only the report dict, so the report and the scenarios that
make it both use it without importing each other.
"""

from __future__ import annotations

import math
import os
from typing import Any


def _plot_scale(ax: Any, scale: dict[str, Any]) -> None:
    rows = scale["rows"]
    xs = [r["workers"] for r in rows]
    ax.plot(xs, [r["throughput_rps"] for r in rows], marker="o", label="measured")
    ax.plot(xs, [r["ideal_rps"] for r in rows], linestyle="--", color="grey", label="ideal")
    ax.set_xticks(xs)
    ax.set_xlabel("gateway workers")
    ax.set_ylabel("answers per second")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title("throughput vs workers (ideal: 1-worker throughput x N)")


def plot(report: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """PNG: latency percentile spectrum per target, plus the timeline if any."""
    if report.get("scenario") == "soak":  # series over time, not latencies
        plot_samples(report, str(path))
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = report.get("timeline")
    scale = report.get("scale")
    rows = 1 + bool(tl) + bool(scale)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 4.2 * rows), squeeze=False)
    if scale:
        _plot_scale(axes[rows - 1][0], scale)
    ax = axes[0][0]
    ticks = [0.0, 90.0, 99.0, 99.9, 99.99, 99.999]
    for name, summary in report.get("targets", {}).items():
        points = [(p, v) for p, v in summary.get("spectrum", []) if p < 100.0]
        if points:
            xs = [_nines(p) for p, _ in points]
            ax.plot(xs, [v for _, v in points], label=name, linewidth=1.6)
    shown = [t for t in ticks if _nines(t) <= max(ax.get_xlim()[1], 1.0) + 1e-6]
    ax.set_xticks([_nines(t) for t in shown], [f"{t:g}%" for t in shown])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"bench {report.get('scenario', '')}: latency by percentile")
    if report.get("targets"):
        ax.legend()
    if tl:
        ax2 = axes[1][0]
        step = tl["step_s"]
        for kind, values in tl["rps_by_kind"].items():
            ax2.plot([i * step for i in range(len(values))], values, label=kind, linewidth=1.2)
        ax2.set_xlabel("time since load start (s)")
        ax2.set_ylabel("answers per second")
        ax2.grid(True, alpha=0.3)
        for event in report.get("events", []):
            if event["what"].endswith("(done)"):
                continue  # one line per action, at its start
            label = event["what"].removesuffix(" (start)")
            ax2.axvline(event["t_s"], color="grey", linestyle="--", linewidth=1)
            ax2.annotate(
                label, (event["t_s"], 0.03), xycoords=("data", "axes fraction"), rotation=90,
                fontsize=8, xytext=(3, 0), textcoords="offset points", va="bottom",
            )  # fmt: skip
        if tl.get("seconds"):
            ax3 = ax2.twinx()
            ax3.step(
                [s + 1 for s in tl["seconds"]],
                tl["p99_ms"],
                where="pre",
                color="black",
                linewidth=1,
                label="p99 ms, all answers, per second",
            )
            ax3.set_ylabel("p99 latency (ms)")
            ax3.legend(loc="upper right")
        ax2.legend(loc="upper left", fontsize=8)
        ax2.set_title("outcomes over time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _nines(percentile: float) -> float:
    """x coordinate of a percentile: 0 at 0%, 1 at 90%, 2 at 99%, ..."""
    return -math.log10(max(1.0 - percentile / 100.0, 1e-9))


def plot_samples(report: dict[str, Any], path: str) -> None:
    """PNG: each sampled series over time, the warm-up shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report.get("samples", [])
    series = [
        ("rss_mib_per_worker", "RSS per worker (MiB)"),
        ("cache_mib", "cache, counted (MiB, all workers)"),
        ("fds", "open FDs (all workers)"),
        ("connections", "open connections"),
        ("ws_sockets", "WebSocket sockets"),
        ("redis_used_mib", "Redis used_memory (MiB)"),
    ]
    fig, axes = plt.subplots(len(series), 1, figsize=(9, 2.2 * len(series)), sharex=True)
    ts = [s["t_s"] for s in samples]
    bound = report.get("cache_bound_mib")
    for ax, (name, label) in zip(axes, series, strict=True):
        ax.plot(ts, [s[name] for s in samples], marker=".", linewidth=1.4)
        if name == "cache_mib" and bound:
            ax.axhline(bound, color="grey", linestyle="--", linewidth=1, label="cache.max_bytes")
            ax.legend(loc="lower right", fontsize=8)
        ax.axvspan(0, report.get("warmup_s", 0), color="grey", alpha=0.15)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0].set_title("bench soak: sampled over time (shaded: warm-up, not judged)")
    axes[-1].set_xlabel("time since load start (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
