"""API keys: their one shape and their hash.

A key is 32 characters of base62 drawn with ``secrets`` (about 190 bits).
Anything else is malformed and refused before Redis is asked, so junk
traffic costs no round trip. Redis only ever sees ``sha256(key)``.
"""

from __future__ import annotations

import hashlib
import secrets
import string

KEY_ALPHABET = string.ascii_letters + string.digits
KEY_LENGTH = 32


def generate_key() -> str:
    """A new API key: 32 base62 characters from the OS CSPRNG."""
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(KEY_LENGTH))


def well_formed(key: str) -> bool:
    """True if ``key`` has the one shape every key has (no Redis needed)."""
    return len(key) == KEY_LENGTH and key.isascii() and key.isalnum()


def key_hash(key: str) -> str:
    """Hex SHA-256 of a key: the only form in which a key is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_hint(key: str) -> str:
    """What the dashboard shows after creation: enough to tell keys apart."""
    return f"{key[:4]}…{key[-4:]}"
