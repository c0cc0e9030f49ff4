"""Slowing down password guessing and sign-up floods.

A log-in attempt is counted BEFORE its password is checked, in one script
call (``Store.take_attempt``): forty parallel guesses cannot all be checked
because none of them was counted yet. Past a limit the password is not
checked at all: 429 with ``Retry-After``, so a guesser learns nothing and
burns no argon2 time of ours. Three counters:

- per (email, client IP): the tight one, what a typo-prone owner meets;
- per client IP, any email: one address spraying many accounts;
- per email, any IP: a looser ceiling against slow guessing from many
  addresses. An (email, IP) pair that logged in recently skips this one, so
  strangers elsewhere cannot lock the owner out by failing on purpose.

A right password clears its pair counter and gives its attempt back to the
others. Client IPs are grouped: IPv6 by /64 (one subscriber usually holds a
whole /64), IPv4 by address. Sign-ups are counted per IP group because each
one costs an argon2 hash.
"""

from __future__ import annotations

import hashlib
import ipaddress

from gateway.config import DashboardConfig
from gateway.store.accounts import AttemptCounter, Store


def ip_group(ip: str) -> str:
    """The unit per-IP limits count: IPv4 address, or IPv6 /64 network.

    An IPv4-mapped IPv6 address counts as its IPv4 address; anything that
    is not an IP (a unix socket peer) is one group of its own.
    """
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return "-"
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


def _digest(*parts: str) -> str:
    # Hashed so any string a visitor types makes a short, tidy Redis key.
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _email(email: str) -> str:
    return email.strip().lower()


def _names(email: str, ip: str) -> tuple[str, str, str, str]:
    """(pair counter, ip counter, email counter, pair marker) names."""
    e, g = _email(email), ip_group(ip)
    return f"p:{_digest(e, g)}", f"ip:{g}", f"e:{_digest(e)}", f"ok:{_digest(e, g)}"


async def login_attempt_wait_s(store: Store, cfg: DashboardConfig, email: str, ip: str) -> int:
    """Count this attempt: 0 = go on and check the password; else seconds to wait."""
    pair, per_ip, per_email, marker = _names(email, ip)
    window = cfg.login_window_s * 1000
    wait_ms = await store.take_attempt(
        (
            AttemptCounter(pair, cfg.login_per_email_ip, window),
            AttemptCounter(per_ip, cfg.login_per_ip, window),
            AttemptCounter(
                per_email, cfg.login_per_email, cfg.login_email_window_s * 1000, skippable=True
            ),
        ),
        marker,
    )
    return -(-wait_ms // 1000)


async def login_succeeded(store: Store, cfg: DashboardConfig, email: str, ip: str) -> None:
    """The owner got in from here: earlier typos stop counting, and this pair is known."""
    pair, per_ip, per_email, marker = _names(email, ip)
    await store.attempt_succeeded(pair, (per_ip, per_email), marker, cfg.login_remember_s * 1000)


async def signup_wait_s(store: Store, cfg: DashboardConfig, ip: str) -> int:
    """Count this sign-up attempt; seconds to wait if the IP group made too many."""
    count, ttl = await store.count_failure(
        f"signup:ip:{ip_group(ip)}", max(1, cfg.signup_window_s) * 1000
    )
    return max(1, -(-ttl // 1000)) if count > cfg.signup_per_ip else 0
