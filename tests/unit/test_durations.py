"""One duration grammar for ``gateway`` and ``python -m bench``."""

from __future__ import annotations

import argparse

import pytest

from bench.units import duration_arg
from bench.units import parse_duration as bench_parse
from gateway.cli.durations import parse_duration, parse_duration_ms
from gateway.cli.parser import parse_duration_ms as cli_parse_ms


def test_bench_and_cli_share_one_parser() -> None:
    assert bench_parse is parse_duration
    # Units only the old CLI parser knew now work in the bench, and the other way round.
    assert bench_parse("1w") == 7 * 86_400
    assert bench_parse("2d") == 2 * 86_400
    assert cli_parse_ms("250us") == 0
    assert cli_parse_ms("2min") == 120_000
    assert cli_parse_ms("1e3ms") == 1000


@pytest.mark.parametrize("text", ["1ms", "7ms", "29ms", "999ms", "0.001s", "1.1s", "3h", "30d"])
def test_milliseconds_are_exact(text: str) -> None:
    value = float(text.rstrip("smhd"))
    unit = text[len(text.rstrip("smhd")) :]
    per_ms = {"ms": 1, "s": 1000, "h": 3_600_000, "d": 86_400_000}[unit]
    assert parse_duration_ms(text) == int(value * per_ms)


def test_bad_durations_are_argparse_errors() -> None:
    for parse in (cli_parse_ms, duration_arg()):
        with pytest.raises(argparse.ArgumentTypeError):
            parse("soon")
        with pytest.raises(argparse.ArgumentTypeError):
            parse("5 parsecs")
