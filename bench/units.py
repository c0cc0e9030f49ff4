"""Argparse types for durations and rates ("20ms", "1.5s", "2m", "5%").

The duration grammar itself is gateway.cli.durations, shared with the ``gateway`` command.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from gateway.cli.durations import parse_duration


def duration_arg(default_unit: str = "s") -> Callable[[str], float]:
    """An argparse ``type=`` that reads a duration (seconds)."""

    def parse(text: str) -> float:
        try:
            return parse_duration(text, default_unit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "duration"
    return parse


def fraction_arg(text: str) -> float:
    """An argparse ``type=`` for a rate in [0, 1]; "5%" is accepted too."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1: {text!r}")
    return value


def spread_arg(text: str) -> tuple[float, float]:
    """An argparse ``type=`` for a latency as mean and spread: "5ms+-3ms" -> (0.005, 0.003).

    Milliseconds by default ("20+-10"); "±" works as well as "+-". A bare
    duration has no spread.
    """
    head, sep, tail = text.replace("±", "+-").partition("+-")
    try:
        mean = parse_duration(head.strip(), "ms")
        spread = parse_duration(tail.strip(), "ms") if sep else 0.0
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if spread > mean:
        raise argparse.ArgumentTypeError(f"the spread exceeds the mean: {text!r}")
    return mean, spread


def positive_arg(text: str) -> float:
    """An argparse ``type=`` for a number above zero (a threshold)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def count_arg(text: str) -> int:
    """An argparse ``type=`` for a whole number of at least 1 (rounds, repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


__all__ = [
    "count_arg",
    "duration_arg",
    "fraction_arg",
    "parse_duration",
    "positive_arg",
    "spread_arg",
]
