"""/readyz details for ``serve --workers N``, whose metrics listener is the supervisor's.

The supervisor holds no node pools and no Redis client, so it cannot build
the detailed /readyz itself. Each worker that has no metrics listener of its
own but a multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``: what the
supervisor gives its workers) writes its detailed report there every
``INTERVAL_S`` as ``readyz-<pid>.json`` (written to a temp name, then
renamed: a reader never sees half a file), and removes it on exit. The
supervisor's listener serves the freshest one younger than ``FRESH_S``, and
503 when no worker has written one lately. Every worker probes the same
nodes, so one worker's view is the deployment's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from gateway import typedefs as T
from gateway.tasks import running
from gateway.telemetry.metrics import multiprocess_dir

INTERVAL_S: Final = 2.0
FRESH_S: Final = 10.0  # an older snapshot is a worker that stopped writing
_PATTERN: Final = "readyz-*.json"


Report = Callable[[web.Application, bool], Awaitable[tuple[dict[str, Any], int]]]


@contextlib.asynccontextmanager
async def snapshots(app: web.Application, report: Report) -> AsyncIterator[None]:
    """In a supervised worker, keep its /readyz details (``report``) on disk."""
    folder = multiprocess_dir()
    if folder is None or app[T.CONFIG].server.metrics_listen:
        yield  # a listener of its own serves the details (or nobody asks)
        return
    path = Path(folder) / f"readyz-{os.getpid()}.json"
    try:
        async with running(_write_forever(app, path, report), "readyz-snapshot"):
            yield
    finally:
        path.unlink(missing_ok=True)


async def _write_forever(app: web.Application, path: Path, report: Report) -> None:
    tmp = path.with_suffix(".tmp")
    while True:
        try:
            body, status = await report(app, True)
            tmp.write_bytes(orjson.dumps({"status": status, "body": body}))
            tmp.replace(path)
        except OSError:  # the folder went away (supervisor stopping): try again later
            pass
        await asyncio.sleep(INTERVAL_S)


def freshest(folder: str, now: float | None = None) -> dict[str, Any] | None:
    """The newest worker snapshot younger than ``FRESH_S``: {"status", "body"}; else None."""
    now = time.time() if now is None else now
    best: tuple[float, Path] | None = None
    for path in Path(folder).glob(_PATTERN):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue  # removed as we looked
        if now - mtime <= FRESH_S and (best is None or mtime > best[0]):
            best = (mtime, path)
    if best is None:
        return None
    try:
        snap: dict[str, Any] = orjson.loads(best[1].read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return snap


def network_view(snap: dict[str, Any], name: str) -> tuple[dict[str, Any], int]:
    """/readyz/<name> from a whole-gateway snapshot, as ``network_report`` builds it."""
    body = snap["body"]
    net = body.get("networks", {}).get(name)
    if net is None:
        return {"ready": False, "error": f"no network named {name!r}"}, 404
    view: dict[str, Any] = {"ready": net["ready"], "network": name, **net}
    if "redis" in body.get("requires", []):
        view["redis"] = body["redis"]
        view["ready"] = net["ready"] and body["redis"]["ready"]
    return view, 200 if view["ready"] else 503
