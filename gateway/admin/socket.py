"""``serve --workers``: each worker serves the admin app on a unix socket for the supervisor.

The supervisor's metrics listener (``gateway.ops.metricsport``) has no
pools and no Redis client; it relays ``/admin/*`` to one live worker
through ``admin-<pid>.sock`` in the multiprocess directory (the same
folder as the /readyz snapshots), mode 0600. The worker's admin app checks
the token as on any listener. The socket is removed on exit; one left by a
killed worker refuses connections and the relay tries the next.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from gateway import typedefs as T
from gateway.telemetry.metrics import multiprocess_dir

SOCKET_GLOB = "admin-*.sock"


def socket_path(folder: str, pid: int) -> Path:
    return Path(folder) / f"admin-{pid}.sock"


async def worker_socket_ctx(app: web.Application) -> AsyncIterator[None]:
    """In a supervised worker (a multiprocess dir, no listener of its own): the socket."""
    folder = multiprocess_dir()
    if folder is None or app[T.CONFIG].server.metrics_listen:
        yield
        return
    path = socket_path(folder, os.getpid())
    root = web.Application()
    app[T.ADMIN_MOUNT](root)
    runner = web.AppRunner(root, access_log=None, handle_signals=False)
    await runner.setup()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    site = web.UnixSite(runner, str(path))
    try:
        await site.start()
        os.chmod(path, 0o600)
    except OSError:
        await runner.cleanup()
        yield  # the folder went away (the supervisor stopping): no admin socket
        return
    try:
        yield
    finally:
        await runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
