"""``serve --workers``: the supervisor's listener passes ``/admin/*`` on to one live worker.

The supervisor holds no pools and no Redis client, so the admin API is
answered by a worker, on its unix socket in the multiprocess directory
(``gateway.admin.socket``: ``admin-<pid>.sock``). The newest socket is
tried first; one that refuses (a killed worker's leftover) is skipped.
The method, path, query, ``Authorization`` and ``Content-Type`` headers and
body travel as they came; the worker checks the token. ``POST
/admin/reload`` is the exception: the supervisor answers it itself
(``SupervisorAdmin``), since reloading means starting new workers.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Sequence
from email.message import Message
from io import BufferedIOBase
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from gateway.config import AdminToken
from gateway.ops.adminauth import check

SOCKET_GLOB: Final = "admin-*.sock"  # what socket_path names
TIMEOUT_S: Final = 60.0
MAX_BODY: Final = 1 << 20


def socket_path(folder: str, pid: int) -> Path:
    """Where the worker ``pid`` serves the admin app (``gateway.admin.socket``)."""
    return Path(folder) / f"admin-{pid}.sock"


class SupervisorAdmin(Protocol):
    """What the supervisor does itself for the admin API (``gateway.server.workers``)."""

    def admin_tokens(self) -> Sequence[AdminToken]: ...

    def admin_reload(self, who: str) -> tuple[int, dict[str, Any]]: ...


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _sockets(folder: str) -> list[Path]:
    found: list[tuple[float, Path]] = []
    for path in Path(folder).glob(SOCKET_GLOB):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [p for _, p in sorted(found, reverse=True)]


def relay(
    folder: str, method: str, target: str, headers: dict[str, str], body: bytes
) -> tuple[int, str, bytes] | None:
    """(status, content type, body) from the first worker that answers; None if none does."""
    for path in _sockets(folder):
        conn = _UnixConnection(str(path), TIMEOUT_S)
        try:
            conn.connect()
        except OSError:
            conn.close()
            continue  # a dead worker's socket: the next one
        try:
            conn.request(method, target, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type", "application/json"), resp.read()
        except (OSError, http.client.HTTPException):
            continue  # the worker went away mid-call: the next one
        finally:
            conn.close()
    return None


def admin_answer(
    folder: str,
    admin: SupervisorAdmin | None,
    method: str,
    target: str,
    headers: Message,
    rfile: BufferedIOBase,
) -> tuple[int, str, bytes]:
    """(status, content type, body) for one admin request on the supervisor's listener."""
    try:
        length = int(headers.get("Content-Length") or 0)
    except ValueError:
        length = -1
    if not 0 <= length <= MAX_BODY:
        return _json(413, {"error": f"an admin request body holds at most {MAX_BODY} bytes"})
    body = rfile.read(length) if length else b""
    path = target.split("?", 1)[0]
    if admin is not None and path == "/admin/reload" and method == "POST":
        who, status, why = check(admin.admin_tokens(), headers.get("Authorization"), method, path)
        if who is None or status:
            return _json(status, {"error": why})
        return _json(*admin.admin_reload(who.name))
    passed = {
        name: value
        for name in ("Authorization", "Content-Type")
        if (value := headers.get(name)) is not None
    }
    got = relay(folder, method, target, passed, body)
    if got is None:
        return _json(503, {"error": "no worker answers the admin API right now"})
    return got


def _json(status: int, value: Any) -> tuple[int, str, bytes]:
    return status, "application/json", orjson.dumps(value)
