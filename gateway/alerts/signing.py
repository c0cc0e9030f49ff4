"""The ``X-Gateway-Signature`` header: Stripe's scheme, with each webhook's own secret.

``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``. The timestamp is
inside the signed text, so a receiver that refuses old timestamps (five
minutes is usual) also refuses a replayed delivery. ``verify`` is what a
receiver runs; docs/ALERTS.md shows the same check for a receiver of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER = "X-Gateway-Signature"
SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300


def new_secret() -> str:
    """A webhook's signing secret: 256 random bits, shown to its owner once."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret``."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def header_value(secret: str, body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, t, body)}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    tolerance_s: int = TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """True if ``header`` signs ``body`` with ``secret`` and is at most ``tolerance_s`` old."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields.setdefault(name, []).append(value)
    stamps = fields.get("t", [])
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    t = int(stamps[0])
    current = time.time() if now is None else now
    if abs(current - t) > tolerance_s:
        return False
    want = signature(secret, t, body)
    return any(hmac.compare_digest(want, sent) for sent in fields.get("v1", []))
