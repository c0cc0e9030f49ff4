"""The filter methods, answered by the gateway: ``FilterService.answer`` (no transport).

``answer(khash, plan, method, params)`` returns the ``result`` as JSON bytes,
``(ErrorKind, data)``, or (``eth_getFilterLogs``) the ``eth_getLogs`` to
forward in its place (``rpc.localmethods.ForwardAs``); ``filters.methods`` makes it
the pipeline's local methods (HTTP and WebSocket alike). The node is reached only through the
injected ``NodeCall`` (``filters.nodepath.ReadPath``: the pipeline's read
path, with cache, coalescing and routing by block), the head from the
network's ``HeadTracker``. A filter object is read by the one Go-style
reader (``rpc.params``).

Choices where geth is silent (docs/METHODS.md "Filters"):
- A new filter reports what comes after the head at its creation (geth: logs
  and blocks arriving after it); a numeric ``fromBlock`` above the head
  starts there, a numeric ``toBlock`` ends it. ``eth_getFilterLogs`` scans the
  filter's whole range and is refused by the eth_getLogs range guard when
  that is over the plan's limit.
- ``eth_newFinalizedHeaderFilter`` (BSC) returns the newest finalized block's
  hash when it moved since the last poll (BSC's node sends one per finality
  event; in between, only the newest matters to a poller).
- ``eth_getFilterLogs`` on a block filter, a malformed id, another network's
  filter: ``filter not found``, as geth answers an id it does not hold; and
  ``eth_uninstallFilter`` of another network's filter: ``false``, the filter
  kept (each network's path answers for its own filters only).
- A log filter is refused (-32602, the setting named in ``error.data``) past
  ``filters.max_topic_alternatives`` in one topic position or
  ``filters.max_filter_bytes`` of criteria; a key past
  ``filters.max_key_bytes`` of live filters gets -32000 ``too many filters``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import orjson
from redis.exceptions import RedisError

from gateway.config import FiltersConfig
from gateway.filters.changes import NodeCall, NodeError, ReadLogs, block_changes, logs_changes
from gateway.filters.live import Gauge, LiveFilters
from gateway.filters.logsread import HalvingReader
from gateway.filters.store import FilterState, FilterStore, well_formed_id
from gateway.intel.head import HeadTracker, NetworkHead
from gateway.intel.logsguard import check_logs_range
from gateway.rpc import protocol as rpc
from gateway.rpc.localmethods import ForwardAs
from gateway.rpc.params import LogFilter, canonical_filter, read_filter

log = logging.getLogger("gateway.filters")

NEW_FILTER: Final = "eth_newFilter"
NEW_BLOCK_FILTER: Final = "eth_newBlockFilter"
NEW_FINALIZED_FILTER: Final = "eth_newFinalizedHeaderFilter"
GET_CHANGES: Final = "eth_getFilterChanges"
GET_LOGS: Final = "eth_getFilterLogs"
UNINSTALL: Final = "eth_uninstallFilter"
# The methods a transport hands to ``FilterService.answer`` instead of a node.
FILTER_METHODS: Final = frozenset(
    {NEW_FILTER, NEW_BLOCK_FILTER, NEW_FINALIZED_FILTER, GET_CHANGES, GET_LOGS, UNINSTALL}
)
_KINDS: Final = {NEW_FILTER: "logs", NEW_BLOCK_FILTER: "blocks", NEW_FINALIZED_FILTER: "finalized"}

Answer = bytes | tuple[rpc.ErrorKind, Any] | ForwardAs


class FilterService:
    """One network's filters; state in Redis (``FilterStore``), shared by every process."""

    def __init__(
        self,
        network: str,
        store: FilterStore,
        heads: HeadTracker,
        call: NodeCall,
        cfg: FiltersConfig,
        logs_range: Callable[[str], int],
        live: Gauge | None = None,
        serving: Callable[[], bool] = lambda: True,
        *,
        deadline_s: float = 0.0,
        read_logs: ReadLogs | None = None,
    ) -> None:
        self.network = network
        self._store = store
        self._heads = heads
        self._call = call
        self._cfg = cfg
        self._logs_range = logs_range  # plan name -> its eth_getLogs range limit (0 = none)
        self.live = LiveFilters(cfg.ttl_s, live)  # this worker's count, for the gauge
        # Whether a node of the network is in service: a filter answers from the
        # head, and with no node the gateway serves no head it cannot vouch for.
        self._serving = serving
        # One deadline for all of a poll's node reads (limits.upstream_timeout_s;
        # 0 = none), and the one function that turns its range into reads.
        self._deadline_s = deadline_s
        self._read_logs = read_logs if read_logs is not None else HalvingReader(call, call)

    async def answer(self, khash: str, plan: str, method: str, params: Any) -> Answer:
        """The result JSON of one filter call of key ``khash``, or (error kind, data)."""
        try:
            if method in _KINDS:
                return await self._new(khash, _KINDS[method], params)
            fid = well_formed_id(params[0] if type(params) is list and params else None)
            if type(params) is not list or len(params) != 1:
                return rpc.INVALID_PARAMS, "expected one argument: the filter id"
            if fid is None:  # cannot be one of ours
                return b"false" if method == UNINSTALL else (rpc.FILTER_NOT_FOUND, None)
            if method == UNINSTALL:
                self.live.gone(fid)
                deleted = await self._store.delete(khash, self.network, fid)
                return b"true" if deleted else b"false"
            state = await self._store.load(khash, fid)
            # A logs filter's criteria, read back as written (canonical, so they read).
            crit = read_filter(state.crit) if state is not None and state.kind == "logs" else None
            if state is None or state.net != self.network or isinstance(crit, str):
                self.live.gone(fid)
                return rpc.FILTER_NOT_FOUND, None
            self.live.seen(fid)
            if method == GET_CHANGES:
                return await self._changes(khash, plan, state, crit)
            if method == GET_LOGS:
                return await self._filter_logs(plan, crit)
        except NodeError as exc:
            return exc.kind, exc.data
        except (RedisError, OSError, TimeoutError) as exc:  # fail closed, as admission does
            log.warning("filter state unavailable network=%s error=%r", self.network, exc)
            return rpc.SERVICE_UNAVAILABLE, None
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # an odd node answer
            log.warning("odd node answer network=%s method=%s error=%r", self.network, method, exc)
            return rpc.UPSTREAM_UNAVAILABLE, {"reason": "bad node answer"}
        return rpc.METHOD_NOT_FOUND, None  # pragma: no cover - FILTER_METHODS only

    async def _head(self) -> NetworkHead:
        if not self._serving():
            raise NodeError(rpc.UPSTREAM_UNAVAILABLE, {"reason": "no upstream node in service"})
        head = self._heads.head
        if head.known:
            return head
        # No probe has answered yet: ask the node path once.
        number = orjson.loads(await self._call("eth_blockNumber", []))
        try:
            return NetworkHead(int(number, 16))
        except (TypeError, ValueError):
            raise NodeError(rpc.UPSTREAM_UNAVAILABLE, {"reason": "no block number"}) from None

    async def _new(self, khash: str, kind: str, params: Any) -> Answer:
        crit = LogFilter()
        if kind == "logs":
            # The pipeline has already rebuilt the filter Go-style (rpc.params):
            # reading it again gives the LogFilter, or why it is refused.
            read = read_filter(params[0] if type(params) is list and params else None)
            if isinstance(read, str):
                return rpc.INVALID_PARAMS, read
            crit = read
            if crit.block_hash is not None:
                return rpc.INVALID_PARAMS, "eth_newFilter takes a block range, not blockHash"
            too_big = self._too_big(crit)
            if too_big is not None:
                return rpc.INVALID_PARAMS, too_big
        elif params not in (None, []):
            return rpc.INVALID_PARAMS, "expected no arguments"
        head = await self._head()
        seen: list[list[Any]] = []
        if kind == "finalized":
            next_block = max(head.finalized, 0) + 1
        else:
            next_block = head.number + 1
            if type(crit.from_block) is int and crit.from_block > next_block:
                next_block = crit.from_block
            if head.hash is not None:  # a re-org of this very block shows on the first poll
                seen = [[head.number, head.hash.lower(), []]]
        fid = await self._store.create(
            khash, self.network, kind, canonical_filter(crit), next_block, seen
        )
        if fid == 0:
            cap = self._cfg.max_per_key
            return rpc.TOO_MANY_FILTERS, {
                "reason": f"this key has {cap} live filters, the most allowed; "
                "uninstall one (eth_uninstallFilter) or let one expire",
                "max_filters": cap,
            }
        if not isinstance(fid, str):
            cap = self._cfg.max_key_bytes
            return rpc.TOO_MANY_FILTERS, {
                "reason": f"this key's live filters would hold more than {cap} bytes "
                "(filters.max_key_bytes); uninstall one (eth_uninstallFilter) or let one expire",
                "limit": "filters.max_key_bytes",
                "max_key_bytes": cap,
            }
        self.live.seen(fid)
        return orjson.dumps(fid)

    def _too_big(self, crit: LogFilter) -> dict[str, Any] | None:
        """Why a log filter is more than one filter may hold (error.data), or None."""
        most = self._cfg.max_topic_alternatives
        for position, alternatives in enumerate(crit.topics or ()):
            if type(alternatives) is list and len(alternatives) > most:
                return {
                    "reason": f"topic position {position} has {len(alternatives)} alternatives, "
                    f"at most {most} (filters.max_topic_alternatives)",
                    "limit": "filters.max_topic_alternatives",
                    "max_topic_alternatives": most,
                }
        size = len(orjson.dumps(canonical_filter(crit)))
        if size > self._cfg.max_filter_bytes:
            return {
                "reason": f"the filter takes {size} bytes, at most "
                f"{self._cfg.max_filter_bytes} (filters.max_filter_bytes)",
                "limit": "filters.max_filter_bytes",
                "max_filter_bytes": self._cfg.max_filter_bytes,
            }
        return None

    async def _changes(
        self, khash: str, plan: str, state: FilterState, crit: LogFilter | None
    ) -> Answer:
        """One poll: every node read it makes shares one deadline, then the state is saved."""
        try:
            async with asyncio.timeout(self._deadline_s or None):
                out, next_block, seen = await self._poll(plan, state, crit)
        except TimeoutError:
            reason = f"the poll's node reads took over {self._deadline_s:g} s"
            raise NodeError(rpc.UPSTREAM_TIMEOUT, {"reason": reason}) from None
        if not await self._store.save(khash, state, next_block, seen):
            # Another poll of this filter (a retry, another process) got there
            # first and answered these changes: never deliver them twice.
            return b"[]"
        return orjson.dumps(out)

    async def _poll(
        self, plan: str, state: FilterState, crit: LogFilter | None
    ) -> tuple[list[Any], int, list[list[Any]]]:
        head = await self._head()
        cfg = self._cfg
        out: list[Any]
        if crit is not None:
            out, next_block, seen = await logs_changes(
                crit,
                state.next,
                state.seen,
                head,
                self._call,
                span=self._logs_range(plan),
                reorg_polls=cfg.reorg_polls,
                remember_bytes=cfg.remember_bytes,
                read_logs=self._read_logs,
            )
        elif state.kind == "blocks":
            hashes, next_block, seen = await block_changes(
                state.next,
                state.seen,
                head,
                self._call,
                max_blocks=cfg.max_blocks_per_poll,
                reorg_polls=cfg.reorg_polls,
            )
            out = list(hashes)
        else:
            out, next_block, seen = await self._finalized(state, head)
        return out, next_block, seen

    async def _finalized(
        self, state: FilterState, head: NetworkHead
    ) -> tuple[list[Any], int, list[list[Any]]]:
        number = head.finalized
        digest: Any = None
        if number < 0:  # no probe reported finality yet: ask the node path
            block = orjson.loads(await self._call("eth_getBlockByNumber", ["finalized", False]))
            if type(block) is dict and type(block.get("number")) is str:
                number, digest = int(block["number"], 16), block.get("hash")
        if number < state.next:
            return [], state.next, state.seen
        if digest is None:
            block = orjson.loads(await self._call("eth_getBlockByNumber", [hex(number), False]))
            digest = block.get("hash") if type(block) is dict else None
        if type(digest) is not str:
            return [], state.next, state.seen
        return [digest.lower()], number + 1, state.seen

    async def _filter_logs(self, plan: str, crit: LogFilter | None) -> Answer:
        if crit is None:  # a block filter has no logs
            return rpc.FILTER_NOT_FOUND, None
        spec = canonical_filter(crit)
        spec.setdefault("fromBlock", "latest")
        spec.setdefault("toBlock", "latest")
        refused = check_logs_range([spec], self._heads, self._logs_range(plan))
        if refused is not None:
            return rpc.INVALID_PARAMS, refused
        # The node's answer goes to the client as an eth_getLogs answer would:
        # through the pipeline's read path and its bounded relay, never read
        # whole here (the relay's memory bound holds on both transports).
        return ForwardAs("eth_getLogs", [spec])
