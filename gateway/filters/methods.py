"""``FilterMethods``: the filter methods as local methods of a network's pipeline.

Registered on both transports (``rpc.localmethods``), so a filter made over HTTP
is polled over a WebSocket and the other way round; the pipeline validates,
admits and meters each call at its plan's weight before it gets here, and
an ``eth_getLogs`` range over the plan's limit is refused by the service
itself for ``eth_getFilterLogs`` (and split per poll for changes). Only the
names the network offers are registered (``eth_newFinalizedHeaderFilter``
is BSC's), so an operator's method list still decides.

A refusal carries its HTTP status: a single HTTP call whose node read
failed answers 502 / 504, one whose filter state Redis could not give 503,
as any other call would; in a batch or on a socket the error takes the
call's place.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from gateway.config import Config
from gateway.filters.live import Gauge
from gateway.filters.logsread import HalvingReader, ReadLogs
from gateway.filters.nodepath import ReadPath
from gateway.filters.service import FILTER_METHODS, FilterService
from gateway.filters.store import FilterStore
from gateway.rpc.localmethods import CallError, ForwardAs, LocalContext, LocalMethods
from gateway.rpc.pipeline import Pipeline
from gateway.rpc.protocol import Call
from gateway.store.errorcounts import ErrorCounter


def add_filter_methods(
    pipeline: Pipeline, store: FilterStore, errors: ErrorCounter, live: Gauge
) -> FilterService:
    """Give a bound pipeline its network's filter methods (at start-up, after ``bind``)."""
    cfg, network = pipeline.cfg, pipeline.network
    path = ReadPath(pipeline.reads)
    service = FilterService(
        network.name,
        store,
        pipeline.pool.intel.heads,
        path,
        cfg.filters,
        cfg.max_logs_range,
        live=live,
        serving=lambda: pipeline.pool.intel.serving,
        deadline_s=cfg.limits.upstream_timeout_s,
        read_logs=logs_reader(path, cfg),
    )
    FilterMethods(service, errors).register(pipeline.local, network.methods)
    return service


def logs_reader(path: ReadPath, cfg: Config) -> ReadLogs:
    """How a network's polls read a range of logs: the one place to plug in a splitter.

    Today ``HalvingReader``: reads within ``filters.max_poll_bytes``, halved
    when too large, the span that worked remembered per filter criteria.
    """
    return HalvingReader(path.within(cfg.filters.max_poll_bytes), path)


class FilterMethods:
    """One network's filter handlers over its ``FilterService``."""

    def __init__(self, service: FilterService, errors: ErrorCounter) -> None:
        self.service = service
        self.errors = errors

    def register(self, local: LocalMethods, offered: Collection[str]) -> None:
        """Answer the filter methods ``offered`` names, on every transport."""
        for name in sorted(FILTER_METHODS):
            if name in offered:
                local.add(name, self.answer)

    async def answer(self, call: Call, ctx: LocalContext) -> Any:
        khash = ctx.caller.khash
        assert khash is not None  # only an admitted call reaches a local method
        out = await self.service.answer(khash, ctx.plan, call.method, call.params)
        if isinstance(out, bytes):
            return orjson.Fragment(out)
        if isinstance(out, ForwardAs):
            return out
        kind, data = out
        if call.has_id:  # counted like a node's error answer (the key's error count)
            self.errors.answered(khash)
        raise CallError.of(kind, data)
