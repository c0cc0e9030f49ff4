"""How a configured URL may be shown in logs, /readyz and metrics: with its secrets cut out.

Node providers put the API key in different places: ``user:pass@`` (basic
auth), the path (Infura ``/v3/<key>``, Alchemy ``/v2/<key>``, NodeReal
``/v1/<key>``, QuickNode ``/<token>/``) or the query string
(``?apikey=...``); a Redis URL carries its password in the userinfo. So:

- userinfo is replaced by ``***`` (``https://***@host``);
- each query value is replaced by ``***`` (the names stay: they say what
  was there);
- a path segment that may be a token is replaced by ``***``: one with a
  digit and longer than 8 characters, or longer than 24 whatever it holds.
  Short words (``v1``, ``rpc``, ``bsc-mainnet``) stay, so two upstreams of
  one provider still look different when their host differs;
- the fragment is dropped.

Scheme, host and port stay: they are what an operator needs to find the node.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

_MASK = "***"


def _secret_segment(segment: str) -> bool:
    if len(segment) > 24:
        return True
    return len(segment) > 8 and any(ch.isdigit() for ch in segment)


def _query_pair(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    if not eq or _secret_segment(name):  # a bare token, or a name that may be one
        return _MASK
    return f"{name}={_MASK}"


def redact_url(url: str) -> str:
    """``url`` with userinfo, query values and token-like path segments masked."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return _MASK  # not a URL we can take apart: show nothing of it
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{_MASK}@{netloc}"
    path = "/".join(_MASK if _secret_segment(s) else s for s in parts.path.split("/"))
    query = "&".join(_query_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    if not netloc and url.startswith(f"{parts.scheme}://"):  # unix:///path keeps its slashes
        return f"{parts.scheme}://{path}" + (f"?{query}" if query else "")
    return SplitResult(parts.scheme, netloc, path, query, "").geturl()


def scrub(text: str, url: str) -> str:
    """``text`` (an error message that may quote ``url``) with ``url``'s secrets masked."""
    if url in text:
        text = text.replace(url, redact_url(url))
    for secret in _secrets(url):
        text = text.replace(secret, _MASK)
    return text


def _secrets(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [p for p in (parts.username, parts.password) if p]
    found += [s for s in parts.path.split("/") if _secret_segment(s)]
    for pair in parts.query.split("&") if parts.query else ():
        name, eq, value = pair.partition("=")
        found += [v for v in (value if eq else name,) if v]
    # longest first, so a secret that contains another is masked whole; a
    # value under 4 characters is no secret, and masking it would mangle the text
    return sorted({f for f in found if len(f) >= 4}, key=len, reverse=True)
