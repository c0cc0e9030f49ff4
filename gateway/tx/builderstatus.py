"""Builders' own status APIs, asked while their private transactions are followed.

Builders' status APIs differ (names, params, words); the gateway speaks one
generic JSON-RPC form, and a ``private_tx`` entry opts in by naming its
builder's method (``status_method``): params ``[hash]``, result an object
whose ``status`` is ``"pending"``, ``"included"``, ``"failed"`` or
``"dropped"``, with ``blockNumber`` (hex) when included; ``null`` (or an
error) when the builder does not know the hash. A builder whose API has
another shape is put behind a small adapter that answers this form.

Each round the tracker asks every such builder once: with
``status_batch`` all the round's hashes in one JSON-RPC batch, else one
hash per round (the followed transactions in turn). Each call has the
network's ``tx_timeout_s``; a builder that errors, times out or answers
something else gives no answer this round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import orjson

from gateway.config import BuilderConfig
from gateway.tx.dialects import Voice

STATUSES: Final = frozenset({"pending", "included", "failed", "dropped"})
_MAX_ANSWER: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Status:
    """One builder's word on one transaction."""

    status: str  # one of STATUSES
    block: int | None = None


# builder name -> each hash it was asked about -> its status (None: it does not know it)
Answers = dict[str, dict[str, Status | None]]


class StatusAsker:
    """The status-capable builders of one network, asked in one round with ``ask``."""

    def __init__(
        self, session: aiohttp.ClientSession, builders: Sequence[BuilderConfig], timeout_s: float
    ) -> None:
        self._session = session
        self._voices = [Voice.of(b) for b in builders if b.status_method]
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._turn = 0

    @property
    def names(self) -> frozenset[str]:
        return frozenset(v.builder.name for v in self._voices)

    def __bool__(self) -> bool:
        return bool(self._voices)

    async def ask(self, hashes: Sequence[str]) -> Answers:
        """Every status builder's answers on ``hashes`` (a builder that gave none: absent)."""
        if not hashes or not self._voices:
            return {}
        one = [hashes[self._turn % len(hashes)]]
        self._turn += 1
        voices = self._voices
        got = await asyncio.gather(
            *(self._one(v, hashes if v.builder.status_batch else one) for v in voices),
            return_exceptions=True,
        )
        return {v.builder.name: g for v, g in zip(voices, got, strict=True) if isinstance(g, dict)}

    async def _one(self, voice: Voice, hashes: Sequence[str]) -> dict[str, Status | None]:
        method = voice.builder.status_method
        calls = [
            {"jsonrpc": "2.0", "id": i, "method": method, "params": [h]}
            for i, h in enumerate(hashes)
        ]
        body = orjson.dumps(calls if voice.builder.status_batch else calls[0])
        async with self._session.post(
            voice.builder.url, data=body, headers=voice.headers(), timeout=self._timeout
        ) as resp:
            payload = orjson.loads(await resp.content.read(_MAX_ANSWER))
        answers = payload if isinstance(payload, list) else [payload]
        out: dict[str, Status | None] = {}
        for answer in answers:
            cid = answer.get("id") if isinstance(answer, dict) else None
            if not isinstance(cid, int) or not 0 <= cid < len(hashes):
                continue
            if "result" in answer:  # an error is no answer on that hash
                out[hashes[cid]] = status_of(answer["result"])
        return out


def status_of(result: Any) -> Status | None:
    """The generic form's result as a Status; None for anything else (not an answer)."""
    if not isinstance(result, dict) or result.get("status") not in STATUSES:
        return None
    block = result.get("blockNumber")
    number: int | None = None
    if isinstance(block, str) and block.startswith("0x"):
        try:
            number = int(block, 16)
        except ValueError:
            number = None
    elif isinstance(block, int) and not isinstance(block, bool):
        number = block
    return Status(str(result["status"]), number)
