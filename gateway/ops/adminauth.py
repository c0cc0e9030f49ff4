"""Who calls the admin API: ``Authorization: Bearer <token>`` checked against ``admin.tokens``.

The config holds only each token's hex SHA-256; the presented token is
hashed and compared with every configured hash in constant time
(``hmac.compare_digest``, all of them, whatever matched), so neither the
answer nor its timing says which hash was close. A read token may call
GET (and HEAD) only; everything else needs a write token. Logged by the
token's name, never its value. Shared by the workers' admin app
(``gateway.admin``) and the supervisor's listener (``metricsport``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence

from gateway.config import AdminToken

log = logging.getLogger("gateway.admin")

READ_METHODS = frozenset({"GET", "HEAD"})


def token_of(header: str | None) -> str | None:
    """The token in an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or len(value) > 512:
        return None
    return value


def authenticate(tokens: Sequence[AdminToken], header: str | None) -> AdminToken | None:
    """The configured token ``header`` presents, or None (missing, malformed, unknown)."""
    token = token_of(header)
    if token is None:
        return None
    digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()
    found: AdminToken | None = None
    for entry in tokens:  # every entry compared: the time does not depend on which matched
        if hmac.compare_digest(digest, entry.sha256):
            found = entry
    return found


def check(
    tokens: Sequence[AdminToken], header: str | None, method: str, path: str
) -> tuple[AdminToken | None, int, str]:
    """(the caller, 0, "") when allowed, else (caller or None, 401/403, why), logged."""
    caller = authenticate(tokens, header)
    if caller is None:
        why = "no admin token configured" if not tokens else "missing or unknown admin token"
        log.warning("admin call refused status=401 method=%s path=%s why=%s", method, path, why)
        return None, 401, why
    if method.upper() not in READ_METHODS and caller.role != "write":
        log.warning(
            "admin call refused status=403 token=%s method=%s path=%s why=read-only token",
            caller.name,
            method,
            path,
        )
        return caller, 403, f"the token {caller.name!r} may only read (GET)"
    log.info(
        "admin call token=%s role=%s method=%s path=%s", caller.name, caller.role, method, path
    )
    return caller, 0, ""
