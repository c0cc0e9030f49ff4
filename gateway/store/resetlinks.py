"""Password-reset links: a one-time token (stored as its SHA-256, TTL) that lets the
account's owner set a new password.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from gateway.store.accounts import Account, NotFound, normalize_email
from gateway.store.securitycore import SecurityCore


class ResetLinks(SecurityCore):
    """Create, read and use password-reset tokens (a mixin of ``SecurityStore``)."""

    if TYPE_CHECKING:  # SecurityStore's, used when a reset sets the new password

        async def set_password(self, account_id: str, password: str) -> None: ...

        async def end_sessions(self, account_id: str, keep_session_id: str = "") -> int: ...

    async def create_reset_token(self, email: str, ttl_s: int) -> tuple[Account, str]:
        """A one-time token for the account's password (``gateway accounts reset-password``)."""
        account = await self.store.account_by_email(normalize_email(email))
        token = secrets.token_urlsafe(32)
        await self.redis.set(self._reset(token), account.id, ex=max(1, ttl_s))
        return account, token

    async def _account_or_none(self, account_id: str | None) -> Account | None:
        """The account a reset token names; None when there is none (spent, erased)."""
        if not account_id:
            return None
        try:
            return await self.store.account(account_id)
        except NotFound:
            return None

    async def reset_account(self, token: str) -> Account | None:
        """Whose link this is, without spending it (the page shows the form)."""
        if not token or len(token) > 128 or not token.isprintable():
            return None
        return await self._account_or_none(await self.redis.get(self._reset(token)))

    async def use_reset_token(self, token: str, password: str) -> Account | None:
        """Set the password if the link is still good; the link dies either way.

        GETDEL makes the token single-use even when two submits race. Every
        session of the account ends: whoever had the old password is out.
        """
        if not token or len(token) > 128 or not token.isprintable():
            return None
        account = await self._account_or_none(await self.redis.getdel(self._reset(token)))
        if account is None:
            return None
        await self.set_password(account.id, password)
        await self.end_sessions(account.id)
        return account
