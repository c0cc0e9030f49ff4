"""API keys: their one shape, hashing, and extraction from a request.

A key is 32 characters of base62 drawn with ``secrets`` (about 190 bits).
Anything else is malformed and refused before Redis is asked, so junk
traffic costs no round trip. Redis only ever sees ``sha256(key)``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

KEY_ALPHABET = string.ascii_letters + string.digits
KEY_LENGTH = 32

# Sentinel results of ``extract_key``.
NO_KEY = ""
BAD_KEY = None


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


def extract_key(path_key: str, authorization: str | None) -> str | None:
    """The request's key, ``NO_KEY`` when none was sent, ``BAD_KEY`` when refused.

    A key in the path and a different one in ``Authorization`` is refused as
    an authentication failure: one of the two is wrong, and guessing which
    would let a leaked path key ride on someone else's header. The
    comparison is constant-time because both strings are secrets.
    """
    header_key = NO_KEY
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return BAD_KEY
        header_key = token.strip()
    if path_key and header_key:
        if not hmac.compare_digest(path_key.encode(), header_key.encode()):
            return BAD_KEY
        return path_key
    return path_key or header_key
