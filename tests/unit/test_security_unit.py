"""Pure helpers of the security store: IP masking, TOTP step matching, recovery codes."""

from __future__ import annotations

import time

import pyotp
import pytest

from gateway.identity.netmask import mask_ip
from gateway.store.twofactor import (
    _matching_step,
    new_recovery_code,
    normalize_recovery_code,
)


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("203.0.113.77", "203.0.113.0/24"),
        ("2001:db8:1234:5678::1", "2001:db8:1234::/48"),
        ("::ffff:198.51.100.9", "198.51.100.0/24"),
        ("", ""),
        ("not an address", ""),
        ("/tmp/unix.sock", ""),
    ],
)
def test_mask_ip_keeps_the_network_only(address: str, shown: str) -> None:
    assert mask_ip(address) == shown


def test_totp_codes_match_their_step_within_one_step_of_skew() -> None:
    secret = pyotp.random_base32()
    totp = pyotp.TOTP(secret)
    now = time.time()
    step = int(now) // totp.interval
    for skew in (-1, 0, 1):
        code = totp.at(now + 30 * skew)
        assert _matching_step(secret, code, now=now) == step + skew
    assert _matching_step(secret, totp.at(now + 90), now=now) is None
    assert _matching_step(secret, totp.at(now - 90), now=now) is None


@pytest.mark.parametrize("code", ["", "12345", "1234567", "12345a", "١٢٣٤٥٦", "12 345", "\x00" * 6])
def test_odd_codes_never_match_and_never_raise(code: str) -> None:
    assert _matching_step(pyotp.random_base32(), code) is None


def test_recovery_codes_are_random_and_forgiving_to_type() -> None:
    codes = {new_recovery_code() for _ in range(200)}
    assert len(codes) == 200
    for code in list(codes)[:5]:
        assert len(code) == 11 and code[5] == "-"
        assert normalize_recovery_code(f" {code.upper()} ") == code.replace("-", "")
