"""API keys in a request: where the key is taken from (path or ``Authorization``).

The key's shape and hash are ``identity.keys`` (the store makes keys with them
too); they are re-exported here for the callers that reach them through
``rpc.auth``.
"""

from __future__ import annotations

import hmac

from gateway.identity.keys import generate_key, key_hash, key_hint, well_formed

__all__ = [
    "BAD_KEY",
    "NO_KEY",
    "extract_key",
    "generate_key",
    "key_hash",
    "key_hint",
    "well_formed",
]

# Sentinel results of ``extract_key``.
NO_KEY = ""
BAD_KEY = None


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
