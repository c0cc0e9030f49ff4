"""Slowing down password guessing and sign-up floods.

Failed log-ins are counted per email and per client IP in fixed windows
(``Store.count_failure``, one atomic script call). Past the limit the
password is not even checked: the answer is 429 with ``Retry-After``, so a
guesser learns nothing and burns no argon2 time of ours. Sign-ups are
counted per IP because each one costs an argon2 hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.accounts import Store


@dataclass(frozen=True, slots=True)
class Rule:
    limit: int
    window_ms: int


LOGIN_PER_EMAIL = Rule(limit=5, window_ms=15 * 60_000)
LOGIN_PER_IP = Rule(limit=20, window_ms=15 * 60_000)
SIGNUP_PER_IP = Rule(limit=10, window_ms=60 * 60_000)


def _email_counter(email: str) -> str:
    # Hashed so any string a visitor types makes a short, tidy Redis key.
    return "login:e:" + hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]


def _ip_counter(kind: str, ip: str) -> str:
    return f"{kind}:ip:{ip or '-'}"


async def login_wait_s(store: Store, email: str, ip: str) -> int:
    """Seconds until this email/IP may try again; 0 when a try is allowed now."""
    wait_ms = 0
    for name, rule in (
        (_email_counter(email), LOGIN_PER_EMAIL),
        (_ip_counter("login", ip), LOGIN_PER_IP),
    ):
        count, ttl = await store.failures(name)
        if count >= rule.limit:
            wait_ms = max(wait_ms, ttl)
    return -(-wait_ms // 1000) if wait_ms else 0


async def login_failed(store: Store, email: str, ip: str) -> None:
    await store.count_failure(_email_counter(email), LOGIN_PER_EMAIL.window_ms)
    await store.count_failure(_ip_counter("login", ip), LOGIN_PER_IP.window_ms)


async def login_succeeded(store: Store, email: str) -> None:
    """The owner got in: earlier typos stop counting against the email."""
    await store.clear_failures(_email_counter(email))


async def signup_wait_s(store: Store, ip: str) -> int:
    """Count this sign-up attempt; seconds to wait if the IP made too many."""
    count, ttl = await store.count_failure(_ip_counter("signup", ip), SIGNUP_PER_IP.window_ms)
    return -(-ttl // 1000) if count > SIGNUP_PER_IP.limit else 0
