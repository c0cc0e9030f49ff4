"""What the security stores share: the ``Store`` they extend and the Redis key names.

``SecurityStore`` (security.py) is composed of the session list (sessionlist.py),
the two-step log-in (twofactor.py) and the reset links (resetlinks.py) over this
core; the Redis layout they keep together is written down in security.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

from redis.commands.core import AsyncScript

from gateway.redis import keyspace as ks
from gateway.store.accounts import Store


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class SecurityCore:
    """The shared ``Store`` (same Redis, same prefix) and the key names of its records."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.redis: Any = store.redis  # decode_responses=True; see Store.__init__
        self.prefix = store.prefix
        self._touch: AsyncScript | None = None  # sessionlist's script, once registered
        self._step: AsyncScript | None = None  # twofactor's

    # -- key names -------------------------------------------------------------

    def _acct(self, account_id: str) -> str:
        return ks.account(self.prefix, account_id)

    def _sessions(self, account_id: str) -> str:
        return ks.account_sessions(self.prefix, account_id)

    def _recovery(self, account_id: str) -> str:
        return ks.account_recovery(self.prefix, account_id)

    def _session_hash(self, ref: str) -> str:
        return ks.session(self.prefix, ref)

    def _pending(self, token: str) -> str:
        return ks.pending_login(self.prefix, _sha(token))

    def _reset(self, token: str) -> str:
        return ks.reset_token(self.prefix, _sha(token))

    @staticmethod
    def session_ref(session_id: str) -> str:
        """The name sessions.py stores a session under (SHA-256 of its id)."""
        return _sha(session_id)
