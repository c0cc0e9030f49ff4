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
import logging
import os
from collections.abc import AsyncIterator

from aiohttp import web

from gateway import typedefs as T
from gateway.ops.adminrelay import socket_path
from gateway.telemetry.metrics import multiprocess_dir

log = logging.getLogger("gateway.admin")


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
    except OSError as exc:  # the folder went away, or its path is too long for a socket
        log.warning("admin socket not served path=%s: %s", path, exc)
        await runner.cleanup()
        yield
        return
    try:
        yield
    finally:
        await runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
