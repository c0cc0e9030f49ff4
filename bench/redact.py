"""Keep API keys and URL credentials out of bench's reports.

Reports are meant to be pasted into issues and pull requests; a review found
``--key`` and ``https://user:pass@host/bsc/KEY`` copied verbatim into the
JSON, the Markdown and stdout. Every report goes through ``redact_report``
before anything is written: known secrets (each ``--key``, the password in
``--target``) are replaced wherever they occur, then URLs and the command
line are rewritten by shape, for secrets bench was never told about.

A key keeps its first 4 characters (``abcd…``) so two runs can still be told
apart; a URL's userinfo becomes ``***``, as does a token-like path segment or
a query value whose name says it is a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
_KEEP = 4
# A path segment that looks like a credential: long, URL-safe, letters and digits.
_TOKENISH = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-.~]{16,}$")
_SECRET_PARAM = re.compile(r"key|token|secret|pass|auth|sig", re.IGNORECASE)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'`<>|]+")
_SECRET_FLAGS = ("--key",)
# Shorter known secrets are only masked by shape (inside URLs): replacing a
# 3-letter password everywhere would mangle the report.
_MIN_KNOWN = 8


def redact_key(key: str) -> str:
    """``abcd…``: enough to tell keys apart, not enough to use one."""
    return key[:_KEEP] + "…" if len(key) > _KEEP else MASK


def redact_url(url: str) -> str:
    """A URL without userinfo, token-like path segments or secret query values."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return MASK
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = (f"{MASK}@" if "@" in parts.netloc else "") + host + (f":{port}" if port else "")
    path = "/".join(MASK if _TOKENISH.match(seg) else seg for seg in parts.path.split("/"))
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret masked and every URL in it redacted."""
    for secret in sorted({s for s in secrets if len(s) >= _MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(secret, redact_key(secret))
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_argv(argv: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line with the values of ``--key`` masked and URLs redacted."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(redact_key(arg))
            mask_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={redact_key(value)}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(redact_text(arg, secrets))
    return out


def secrets_of(keys: Iterable[str] | None, target: str | None) -> list[str]:
    """What bench was told that must not appear in a report: keys, URL passwords."""
    found = [k for k in keys or () if k]
    if target:
        try:
            parts = urlsplit(target)
            found += [s for s in (parts.password, parts.username) if s]
        except ValueError:
            pass
    return found


def redact_report(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy of a report (dicts, lists, strings) with every string redacted."""
    known = list(secrets)
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {redact_report(k, known): redact_report(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_report(v, known) for v in value]
    return value
