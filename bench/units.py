"""Parsing of human durations and rates on the command line ("20ms", "1.5s", "2m")."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def parse_duration(text: str, default_unit: str = "s") -> float:
    """Seconds in ``text``; a bare number is in ``default_unit``."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (try 20ms, 1.5s, 2m)")
    value, unit = match.groups()
    factor = _UNITS.get(unit or default_unit)
    if factor is None:
        raise ValueError(f"unknown unit in {text!r}; use one of {', '.join(_UNITS)}")
    return float(value) * factor


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
