"""The one parser of human durations ("20ms", "1.5s", "2m", "30d") for every command line.

``gateway`` (key expiry, in milliseconds) and ``python -m bench`` (seconds) read the same
grammar, so a unit that works in one works in the other. No I/O, no gateway imports.
"""

from __future__ import annotations

import re
from typing import Final

_SECONDS: Final = {
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86_400.0,
    "w": 7 * 86_400.0,
}
# Milliseconds per unit (1.0 for ms, 1000.0 for s): multiplying the parsed number by these
# keeps "7ms" at 7, where seconds * 1000 at parse time could round down to 6.
_MILLIS: Final = {unit: factor * 1000 for unit, factor in _SECONDS.items()}
_DURATION: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def _split(text: str, default_unit: str) -> tuple[float, str]:
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration; use a number with a unit (e.g. 20ms, 30d)")
    value, unit = match.groups()
    unit = unit or default_unit
    if unit not in _SECONDS:
        raise ValueError(f"unknown unit in {text!r}; use one of {', '.join(_SECONDS)}")
    return float(value), unit


def parse_duration(text: str, default_unit: str = "s") -> float:
    """Seconds in ``text``; a bare number is in ``default_unit``. ValueError when malformed."""
    value, unit = _split(text, default_unit)
    return value * _SECONDS[unit]


def parse_duration_ms(text: str, default_unit: str = "s") -> int:
    """Whole milliseconds in ``text`` (``30d``, ``24h``, ``15s``, ``0``); ValueError if bad."""
    value, unit = _split(text, default_unit)
    return int(value * _MILLIS[unit])
