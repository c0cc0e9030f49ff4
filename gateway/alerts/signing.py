"""The ``X-Gateway-Signature`` header: Stripe's scheme, with each webhook's own secret.

``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``. The timestamp is
inside the signed text, so a receiver that refuses old timestamps (five
minutes is usual) also refuses a replayed delivery. docs/ALERTS.md shows the
receiver's check (the demo's receiver, ``demo.alertsink``, runs it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER = "X-Gateway-Signature"
SECRET_PREFIX = "whsec_"


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
