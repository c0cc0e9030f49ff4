"""The one seam for the gateway's optional parts: how a plug-in joins the app.

A plug-in is a function ``plug(app, parts)`` listed in ``gateway.app.PLUGINS``
(WebSocket, filters, transactions, the dashboard, ...). ``create_app`` calls
each once, in that order, at one moment: after the core resources' cleanup
contexts and the RPC routes are in place, before the router freezes. There a
plug-in may

- add its routes and app keys;
- add local methods to a network (``parts.local[name]``: the methods that
  network's pipeline answers itself);
- append its cleanup contexts: they run after the one that builds the
  pipelines, so a context that needs them reads ``app[PIPELINES]`` (every
  network's pipeline, whole, by name).

Nothing else finds a plug-in, and a plug-in finds nothing but what is here
and the app-wide resources of ``gateway.typedefs``: a new optional part (an
admin API, a transaction dialect's tracker) is one function and one line in
``PLUGINS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from gateway.config import Config
from gateway.rpc.localmethods import LocalMethods
from gateway.rpc.pipeline import Pipeline
from gateway.tasks import running as running  # a plug-in's background task

# Every network's pipeline by name, set by the app's RPC cleanup context before
# any plug-in's cleanup context runs.
PIPELINES: web.AppKey[dict[str, Pipeline]] = web.AppKey("pipelines")


@dataclass(frozen=True, slots=True)
class Parts:
    """What ``create_app`` hands every plug-in."""

    cfg: Config
    # network name -> the local methods its pipeline answers (read per call)
    local: Mapping[str, LocalMethods]


class Plugin(Protocol):
    """An optional part of the gateway; see the module docstring for what it may do."""

    def __call__(self, app: web.Application, parts: Parts) -> None: ...
