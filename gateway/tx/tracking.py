"""Every private transaction followed until it lands: included, replaced or given up.

A transaction (or each transaction of a bundle) a private endpoint accepted
is handed to ``Tracker.follow``. One process follows it, whichever sent it:
the first to ``SET NX`` its claim (``p:tt:{net:hash}``, renewed while it
follows) wins, so two workers that both got it (a client resending through
another connection) do not count it twice. Every ``tx_track_interval_s``
the process asks a public node in service, in one JSON-RPC batch, for the
head and each transaction's receipt (and, where no receipt is there yet,
its sender's mined nonce):

- a receipt: **included**, in its block;
- no receipt, and the sender's mined nonce is past the transaction's:
  **replaced** (the same sender and nonce went in with another transaction);
- no receipt past the bundle's ``maxBlockNumber``, or ``tx_track_blocks``
  blocks after it was sent: **given up**.

Builders with a status method (``builderstatus``) are asked in the same
round, beside the node's batch: an ``included`` from one is the inclusion,
by that builder (in its block when it says which), even before the public
receipt; ``failed`` / ``dropped`` from every status builder that knows the
transaction (the one that accepted it first among them) is **dropped**.

The outcome goes into the key's transaction log (the Transactions page:
``included in block N``), into ``gateway_private_tx_total{network,
builder,outcome}`` (builder: the endpoint that accepted it first, or the
one whose status API said it included it), and,
for an inclusion, the time from send to inclusion into
``gateway_private_tx_inclusion_seconds{network}``. Until then the key's
``eth_getTransactionByHash`` answers the transaction as pending
(``p:{H}:q:pend``, written when it is sent) rather than ``null``, as a
node that has it in its own mempool would.

A process that stops stops following what it claimed (its claims expire):
those transactions stay pending on the page until the entry's TTL. The
work is one batch per interval per network, whatever the number followed
(up to ``MAX_FOLLOWED`` per process; past it a transaction is not followed
and says so in the log).

It stays whole because one round reads the node's and the builders' answers
together and settles each transaction once: split, both halves would need
the round's whole state to keep an outcome from being counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.config import NetworkConfig
from gateway.redis import keyspace as ks
from gateway.redis.flushing import cancelling
from gateway.tx.builderstatus import Answers, StatusAsker
from gateway.tx.codec import DecodedTx
from gateway.tx.txlog import TxLog
from gateway.upstream.pool import NodePool, UpstreamError

log = logging.getLogger("gateway.tx")

MAX_FOLLOWED: Final = 10_000
PENDING_TTL_MS: Final = 3_600_000  # a pending entry outlives any follow-up
PENDING_CACHE_S: Final = 0.5  # a key's pending set, read once for a batch of lookups


@dataclass(slots=True)
class Followed:
    """One transaction being followed by this process."""

    khash: str
    method: str
    tx: DecodedTx
    builder: str
    sent_s: float
    start_block: int = -1  # the head when first looked at
    max_block: int | None = None  # the bundle's maxBlockNumber
    replaced_seen: bool = False  # the nonce was past it once: replaced if still no receipt


def pending_object(tx: DecodedTx, chain_id: int) -> dict[str, Any]:
    """The transaction as ``eth_getTransactionByHash`` answers it while pending."""
    obj: dict[str, Any] = {
        "blockHash": None,
        "blockNumber": None,
        "transactionIndex": None,
        "hash": tx.hash,
        "from": tx.sender,
        "to": tx.to,
        "nonce": hex(tx.nonce),
        "gas": hex(tx.gas),
        "value": hex(tx.value),
        "input": "0x" + tx.data.hex(),
        "type": hex(tx.type),
        "v": hex(tx.v),
        "r": hex(tx.r),
        "s": hex(tx.s),
    }
    if tx.chain_id is not None:
        obj["chainId"] = hex(tx.chain_id)
    if tx.gas_price is not None:
        obj["gasPrice"] = hex(tx.gas_price)
    if tx.max_fee is not None:
        obj["maxFeePerGas"] = hex(tx.max_fee)
        obj["maxPriorityFeePerGas"] = hex(tx.max_priority_fee or 0)
        obj["gasPrice"] = hex(tx.max_fee)
    if tx.type:
        obj["yParity"] = hex(tx.v)
    return obj


class Tracker:
    """One network's followed private transactions in this process; ``run`` follows them."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        net: NetworkConfig,
        pool: NodePool,
        txlog: TxLog,
        outcomes: Any,  # gateway_private_tx_total
        inclusion: Any,  # gateway_private_tx_inclusion_seconds
        status: StatusAsker | None = None,  # the builders' own status APIs, if any
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._net = net
        self._pool = pool
        self._txlog = txlog
        self._outcomes = outcomes
        self._inclusion = inclusion
        self._status = status if status else None
        self._me = secrets.token_hex(8)
        self._followed: dict[str, Followed] = {}
        self._pending: dict[str, tuple[float, dict[str, Any]]] = {}  # khash -> (until, set)
        self._claim_ms = int(max(30.0, net.tx_track_interval_s * 10) * 1000)

    async def follow(
        self,
        khash: str,
        method: str,
        txs: Sequence[DecodedTx],
        builder: str,
        max_block: int | None = None,
    ) -> None:
        """Start following ``txs``, accepted by ``builder``; the ones another process has
        claimed are left to it. One Redis round trip: the pending entries and every claim
        in one pipeline. Redis failing: not followed (a log line, never an error)."""
        room = max(0, MAX_FOLLOWED - len(self._followed))
        for tx in txs[room:]:
            self._txlog.add(
                khash, method, tx.hash, tx.sender, "private", [builder], "not followed (too many)"
            )
        txs = txs[:room]
        self._pending.pop(khash, None)
        try:
            pipe = self._redis.pipeline(transaction=False)
            pend = ks.pending_txs(self._prefix, khash)
            for tx in txs:
                pipe.hset(pend, tx.hash, orjson.dumps(pending_object(tx, self._net.chain_id)))
            pipe.pexpire(pend, PENDING_TTL_MS)
            for tx in txs:
                claim = ks.tx_claim(self._prefix, self._net.name, tx.hash)
                pipe.set(claim, self._me, nx=True, px=self._claim_ms)
            claimed = (await pipe.execute())[len(txs) + 1 :]  # one round trip for all
            now = time.monotonic()
            for tx, mine in zip(txs, claimed, strict=True):
                if mine:
                    self._followed[tx.hash] = Followed(
                        khash, method, tx, builder, now, max_block=max_block
                    )
        except Exception as exc:  # Redis down: the send stands, the follow-up is lost
            log.debug("private transaction not followed: %s", exc)

    async def pending(self, khash: str, tx_hash: str) -> Any:
        """The key's pending private transaction of ``tx_hash``, or None.

        The key's whole pending set is read at once and kept ``PENDING_CACHE_S``
        (dropped here at each send of the key), so a batch of lookups is one
        Redis round trip, not one per call.
        """
        now = time.monotonic()
        hit = self._pending.get(khash)
        if hit is None or hit[0] <= now:
            raw = await self._redis.hgetall(ks.pending_txs(self._prefix, khash))
            if len(self._pending) >= MAX_FOLLOWED:
                self._pending.clear()
            hit = (now + PENDING_CACHE_S, {_text(k): v for k, v in raw.items()})
            self._pending[khash] = hit
        found = hit[1].get(tx_hash.lower())
        return orjson.loads(found) if found else None

    async def run(self) -> None:
        """Look the followed transactions up every ``tx_track_interval_s`` until cancelled."""
        while not cancelling():  # a cancellation redis-py swallowed still ends it
            await asyncio.sleep(self._net.tx_track_interval_s)
            if self._followed:
                try:
                    await self.check()
                except Exception as exc:  # a bad round: the next one tries again
                    log.debug("private transactions not checked: %s", exc)

    async def check(self) -> None:
        """One round: the head, each receipt and each sender's nonce, in one batch, and
        beside it the status builders' word on each (one request per builder)."""
        items = list(self._followed.values())
        calls: list[dict[str, Any]] = [_call(0, "eth_blockNumber", [])]
        for i, item in enumerate(items):
            calls.append(_call(2 * i + 1, "eth_getTransactionReceipt", [item.tx.hash]))
            calls.append(_call(2 * i + 2, "eth_getTransactionCount", [item.tx.sender, "latest"]))
        answers, said = await asyncio.gather(self._ask(calls), self._builders_say(items))
        done: list[tuple[Followed, str, int | None]] = []
        for item in items:
            word = self._builder_word(item, said)
            if word is not None:
                done.append((item, *word))
        head = _int(answers.get(0)) if answers is not None else None
        said_so = {d[0].tx.hash for d in done}
        for i, item in enumerate(items):
            if answers is None or head is None or item.tx.hash in said_so:
                continue
            if item.start_block < 0:
                item.start_block = head
            receipt = answers.get(2 * i + 1)
            mined = _int(answers.get(2 * i + 2))
            if isinstance(receipt, dict) and receipt.get("blockNumber"):
                done.append((item, "included", _int(receipt["blockNumber"])))
            elif mined is not None and mined > item.tx.nonce:
                # twice in a row: once could be the transaction itself mined between
                # the receipt lookup and the nonce lookup of the same batch
                if item.replaced_seen:
                    done.append((item, "replaced", None))
                item.replaced_seen = True
            elif head > self._limit(item):
                done.append((item, "given_up", None))
        for item, outcome, block in done:
            await self._settle(item, outcome, block)
        await self._renew()

    async def _builders_say(self, items: list[Followed]) -> Answers:
        if self._status is None:
            return {}
        try:
            return await self._status.ask([item.tx.hash for item in items])
        except Exception as exc:  # no builder's word this round
            log.debug("builders' status not asked: %s", exc)
            return {}

    def _builder_word(self, item: Followed, said: Answers) -> tuple[str, int | None] | None:
        """``("included", block)`` (the builder noted as the one that landed it) or
        ``("dropped", None)`` from the builders' answers on ``item``, else None."""
        if self._status is None or not said:
            return None
        words = {name: got[item.tx.hash] for name, got in said.items() if item.tx.hash in got}
        for name, word in words.items():
            if word is not None and word.status == "included":
                item.builder = name
                return "included", word.block
        names = self._status.names
        if item.builder not in names or set(words) != names:
            return None  # the first acceptor cannot be asked, or a builder gave no answer
        known = [w for w in words.values() if w is not None]
        if words[item.builder] is not None and all(
            w.status in ("failed", "dropped") for w in known
        ):
            return "dropped", None
        return None

    def _limit(self, item: Followed) -> int:
        limit = item.start_block + self._net.tx_track_blocks
        return min(limit, item.max_block) if item.max_block is not None else limit

    async def _ask(self, calls: list[dict[str, Any]]) -> dict[int, Any] | None:
        nodes = self._pool.in_service()
        if not nodes:
            return None
        try:
            payload = await self._pool.send_to(
                nodes[0], orjson.dumps(calls), self._net.tx_timeout_s
            )
            answers = orjson.loads(payload)
        except (UpstreamError, orjson.JSONDecodeError):
            return None
        if not isinstance(answers, list):
            return None
        return {a["id"]: a.get("result") for a in answers if isinstance(a, dict) and "id" in a}

    async def _settle(self, item: Followed, outcome: str, block: int | None) -> None:
        self._followed.pop(item.tx.hash, None)
        included = f"included in block {block}" if block is not None else "included"
        words = {"included": included, "replaced": "replaced", "dropped": "dropped by the builders"}
        shown = words.get(outcome, f"given up after block {self._limit(item)}")
        self._txlog.add(
            item.khash, item.method, item.tx.hash, item.tx.sender, "private", [item.builder], shown
        )
        self._outcomes.labels(self._net.name, item.builder, outcome).inc()
        if outcome == "included":
            self._inclusion.labels(self._net.name).observe(time.monotonic() - item.sent_s)
        self._pending.pop(item.khash, None)
        with contextlib.suppress(Exception):  # the entries expire on their own anyway
            pipe = self._redis.pipeline(transaction=False)
            pipe.hdel(ks.pending_txs(self._prefix, item.khash), item.tx.hash)
            pipe.delete(ks.tx_claim(self._prefix, self._net.name, item.tx.hash))
            await pipe.execute()

    async def _renew(self) -> None:
        if not self._followed:
            return
        with contextlib.suppress(Exception):
            pipe = self._redis.pipeline(transaction=False)
            for tx_hash in self._followed:
                pipe.pexpire(ks.tx_claim(self._prefix, self._net.name, tx_hash), self._claim_ms)
            await pipe.execute()


def _call(cid: int, method: str, params: list[Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": cid, "method": method, "params": params}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    if isinstance(value, str) and value.startswith("0x"):
        try:
            return int(value, 16)
        except ValueError:
            return None
    return None
