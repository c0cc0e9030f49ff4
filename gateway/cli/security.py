"""``gateway accounts reset-password EMAIL``: the operator's way back into an account.

Prints a link to the dashboard's reset page carrying a one-time token
(valid ``dashboard.reset_link_ttl_s``, 1 h by default). The base URL is
``dashboard.public_url`` when set, else the configured listen address.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config import Config
from gateway.dashboard.password_reset import RESET_PATH
from gateway.store.accounts import Store
from gateway.store.security import SecurityStore


def base_url(cfg: Config) -> str:
    if cfg.dashboard.public_url:
        return cfg.dashboard.public_url.rstrip("/")
    host = cfg.server.host
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if host in ("0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{cfg.server.port}"


def reset_password_command(
    email: str, cfg: Config
) -> Callable[[Store], Awaitable[tuple[Any, str]]]:
    ttl = cfg.dashboard.reset_link_ttl_s

    async def reset(store: Store) -> tuple[Any, str]:
        account, token = await SecurityStore(store).create_reset_token(email, ttl)
        url = f"{base_url(cfg)}{RESET_PATH}?token={token}"
        expires = await store.now_ms() + ttl * 1000
        value = {"email": account.email, "url": url, "expires_at": expires}
        minutes = max(1, ttl // 60)
        return value, (
            f"one-time password reset link for {account.email}, valid {minutes} min "
            f"(hand it over privately):\n{url}"
        )

    return reset
