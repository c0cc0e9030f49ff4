"""The repair half of a shared subscription (``fanout.UpSub``): what was missed
after a gap or a failover is fetched from the new node before the stream resumes.

* ``newHeads``: numbers only ever go up by one. Missed heads are fetched
  with ``eth_getBlockByNumber`` (at most ``ws.gap_fill_max_blocks``).
* ``logs``: the blocks of logs sent recently (``ws.reorg_memory_blocks``)
  are checked against the new node; logs of a block it no longer has are
  sent again with ``removed: true``; logs of missed blocks come from
  ``eth_getLogs``.

Notifications that arrive meanwhile wait in the subscription's backlog and go
through the delivery rules afterwards. ``StreamRepair`` is a mixin of ``UpSub``:
it reads and writes the same per-stream state (``last``, ``covered``,
``recent``, ``filling``, ``backlog``), and its feed is seen through
``RepairFeed`` only, so this module does not import the fan-out.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from typing import Any, Protocol

from gateway.config import WsConfig
from gateway.ws.nodelink import LinkError, NodeLink

log = logging.getLogger("gateway.ws.fanout")

_BLOCK_ONLY = ("transactions", "uncles", "size", "totalDifficulty", "withdrawals")


class RepairFeed(Protocol):
    """What a repair reads and counts on the subscription's feed (``feed.Feed``)."""

    name: str
    cfg: WsConfig
    timeout: float
    filled: int


class StreamRepair:
    """``UpSub``'s repair: fill from ``link``, then replay the backlog."""

    __slots__ = ("backlog", "covered", "filling", "last", "recent")

    feed: RepairFeed
    kind: str
    params: list[Any]
    last: int
    covered: int
    recent: OrderedDict[int, tuple[str, dict[str, dict[str, Any]]]]
    filling: bool
    backlog: list[tuple[bytes, Any, str]]
    dead: bool

    def fan_result(self, result: Any) -> None:
        raise NotImplementedError

    def on_notify(self, raw: bytes, result: Any, uid: str) -> None:
        raise NotImplementedError

    def _remember(self, number: int, bhash: str, index: str, result: Any) -> bool:
        raise NotImplementedError

    async def _repair(self, link: NodeLink) -> None:
        """Fill what was missed from ``link``, then replay the backlog."""
        self.filling = True
        try:
            head = int(await link.call("eth_blockNumber", [], self.feed.timeout), 16)
            if self.kind == "newHeads" and self.last:
                await self._fill_heads(link, head)
            elif self.kind == "logs":
                await self._fill_logs(link, head)
        except (LinkError, TypeError, ValueError) as exc:
            log.info(
                "ws repair incomplete network=%s kind=%s err=%s", self.feed.name, self.kind, exc
            )
        finally:
            self.filling = False
            backlog, self.backlog = self.backlog, []
            for raw, result, uid in backlog:
                if self.filling:  # a new gap started a new repair
                    self.backlog.append((raw, result, uid))
                else:
                    self.on_notify(raw, result, uid)

    async def _fill_heads(self, link: NodeLink, head: int) -> None:
        target = min(head, self.last + self.feed.cfg.gap_fill_max_blocks)
        if self.backlog:
            with contextlib.suppress(TypeError, KeyError, ValueError):
                first = int(self.backlog[0][1]["number"], 16)
                target = min(target, first - 1) if first > self.last else target
        while self.last < target and not self.dead:
            block = await link.call(
                "eth_getBlockByNumber", [hex(self.last + 1), False], self.feed.timeout
            )
            if type(block) is not dict:
                break
            header = {k: v for k, v in block.items() if k not in _BLOCK_ONLY}
            self.last += 1
            self.feed.filled += 1
            self.fan_result(header)
        if self.last < head - self.feed.cfg.gap_fill_max_blocks:
            log.warning("ws gap over limit network=%s skipped_to=%s", self.feed.name, head)

    async def _fill_logs(self, link: NodeLink, head: int) -> None:
        timeout = self.feed.timeout
        reorged: list[int] = []
        for number in list(self.recent):
            if number > head:
                continue
            bhash, logs = self.recent[number]
            block = await link.call("eth_getBlockByNumber", [hex(number), False], timeout)
            if type(block) is dict and block.get("hash") == bhash:
                continue
            reorged.append(number)
            del self.recent[number]
            for old in logs.values():
                self.fan_result({**old, "removed": True})
        start = self.covered + 1 if self.covered else head + 1
        if reorged:  # the new chain's logs of those blocks are sent as well
            start = min(start, *reorged)
        start = max(start, head - self.feed.cfg.gap_fill_max_blocks + 1)
        if start > head:
            self.covered = max(self.covered, head)
            return
        flt = dict(self.params[1]) if len(self.params) > 1 else {}
        flt.update(fromBlock=hex(start), toBlock=hex(head))
        found = await link.call("eth_getLogs", [flt], timeout)
        for item in found if type(found) is list else []:
            try:
                number = int(item["blockNumber"], 16)
                ok = self._remember(number, str(item["blockHash"]), str(item["logIndex"]), item)
            except (TypeError, KeyError, ValueError):
                continue
            if ok:
                self.feed.filled += 1
                self.fan_result(item)
        self.covered = max(self.covered, head)
