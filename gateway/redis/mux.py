"""One multiplexed Redis connection for the admission script.

Why not redis-py here: each ``EVALSHA`` through redis.asyncio costs ~85-110 µs
of client CPU (pool checkout, command packing, a read per reply), which was
a quarter of the gateway's whole budget per request. Here every admission
check issued in one event-loop tick is appended to one buffer and written
with one ``write``; replies are parsed by hiredis as they stream back and
handed to waiting futures in order (Redis answers in order on a connection).

Failure model, so that a sick Redis never stalls requests:

* a batch not answered within ``timeout_s`` aborts the connection and fails
  every waiter (one timer per tick, not one per call);
* a lost connection fails every waiter; the next call reconnects, but not
  more often than every ``retry_interval_s`` (calls in between fail fast);
* ``NOSCRIPT`` (Redis restarted, ``SCRIPT FLUSH``, failover) re-sends the
  call as ``EVAL`` with the script body, which also caches it again.

All errors surface as ``RedisUnavailable`` so callers apply one policy, and
are logged (at most one line per ``log_interval_s``, with the count of those
suppressed) so an operator sees why calls fail, not only a counter.

The URL is read by redis-py's own parser (``ConnectionPool.from_url``), the
one the CLI and dashboard use: ``db`` (path or ``?db=``), user and password
(also in ``unix://user:pass@/path``), and for ``rediss://`` the TLS context
redis-py itself would build from ``ssl_ca_certs``, ``ssl_cert_reqs``,
``ssl_check_hostname``, ... . Two parsers once disagreed: keys written to
db 3 were looked up in db 0, and a private CA failed every call.

It stays whole because the endpoint, the batching protocol and the client share
the failure model above (one timer per tick, reconnect pacing, the NOSCRIPT re-
send), which only holds when read as one.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.asyncio import ConnectionPool, SSLConnection, UnixDomainSocketConnection

from gateway.redis.failurelog import FailureLog

log = logging.getLogger("gateway.redis")


class RedisUnavailable(Exception):
    """Redis could not be asked or did not answer in time."""


class RedisReplyError(Exception):
    """Redis answered with an error reply (``-ERR ...``): it was asked and said no."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect, as redis-py reads the URL."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str = ""  # a unix socket when set
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: ssl.SSLContext | None = None

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """Parse ``url`` with redis-py; raises ``ValueError`` for a bad one."""
        pool = ConnectionPool.from_url(url)
        kw = pool.connection_kwargs
        cls_ = pool.connection_class
        ctx: ssl.SSLContext | None = None
        if issubclass(cls_, SSLConnection):
            # Built by redis-py from the ssl_* query parameters, with its defaults
            # (cert_reqs required, hostname checked): the same TLS as the CLI.
            ctx = cls_(**kw).ssl_context.get()
        return cls(
            host=str(kw.get("host") or "127.0.0.1"),
            port=int(kw.get("port") or 6379),
            path=str(kw["path"]) if issubclass(cls_, UnixDomainSocketConnection) else "",
            db=int(kw.get("db") or 0),
            username=kw.get("username") or None,
            password=kw.get("password"),
            ssl=ctx,
        )

    def setup_commands(self) -> list[tuple[str, ...]]:
        """AUTH and SELECT to send on every new connection, in order."""
        out: list[tuple[str, ...]] = []
        if self.password is not None:
            if self.username:
                out.append(("AUTH", self.username, self.password))
            else:
                out.append(("AUTH", self.password))
        if self.db:
            out.append(("SELECT", str(self.db)))
        return out


def _pack(args: Sequence[str | bytes]) -> bytes:
    """A RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: MuxRedis) -> None:
        self._owner = owner
        self._reader = hiredis.Reader(encoding="utf-8", errors="replace")
        self.transport: asyncio.Transport | None = None
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; same API.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiters = self.waiters
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError:
                self.abort("protocol error")
                return
            if reply is False:
                return
            if not waiters:  # a reply nobody asked for: the stream is out of step
                self.abort("unexpected reply")
                return
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail_all(f"connection lost: {exc}" if exc else "connection closed")
        self._owner._lost(self)

    def abort(self, reason: str) -> None:
        transport = self.transport
        self._fail_all(reason)
        if transport is not None:
            transport.abort()

    def _fail_all(self, reason: str) -> None:
        waiters, self.waiters = self.waiters, collections.deque()
        for fut in waiters:
            if not fut.done():
                fut.set_exception(RedisUnavailable(reason))


class MuxRedis:
    """A single pipelined connection; see the module docstring for why."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 0.25,
        connect_timeout_s: float = 0.5,
        retry_interval_s: float = 0.1,
        log_interval_s: float = 10.0,
    ) -> None:
        self._endpoint = Endpoint.from_url(url)
        self._failed = FailureLog(log_interval_s, address=url)
        self._timeout = timeout_s
        self._connect_timeout = connect_timeout_s
        self._retry_interval = retry_interval_s
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._last_failure = 0.0
        self._buffer: list[bytes] = []
        self._batch: list[asyncio.Future[Any]] = []
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- public ----------------------------------------------------------------
    async def evalsha(
        self, sha: str, script: str, keys: Sequence[str], args: Sequence[str | bytes]
    ) -> Any:
        """Run a cached script; falls back to EVAL once after NOSCRIPT."""
        try:
            reply = await self._call(("EVALSHA", sha, str(len(keys)), *keys, *args))
            if isinstance(reply, hiredis.ReplyError):
                if str(reply).startswith("NOSCRIPT"):
                    reply = await self._call(("EVAL", script, str(len(keys)), *keys, *args))
                if isinstance(reply, hiredis.ReplyError):
                    raise RedisUnavailable(f"script error: {reply}")
        except RedisUnavailable as exc:
            self._failed(exc)
            raise
        return reply

    async def call(self, args: Sequence[str | bytes]) -> Any:
        """Send one command in this tick's batch and wait for its reply.

        Raises ``RedisReplyError`` for an error reply (so no caller can mistake
        one for a value) and ``RedisUnavailable`` when Redis could not be asked.
        """
        try:
            reply = await self._call(args)
        except RedisUnavailable as exc:
            self._failed(exc)
            raise
        if isinstance(reply, hiredis.ReplyError):
            raise RedisReplyError(str(reply))
        return reply

    async def ping(self) -> None:
        """Round trip on this very connection (``/readyz``); raises ``RedisUnavailable``."""
        try:
            await self.call(("PING",))
        except RedisReplyError as reply:
            exc = RedisUnavailable(f"PING failed: {reply}")
            self._failed(exc)
            raise exc from None

    async def _call(self, args: Sequence[str | bytes]) -> Any:
        proto = self._proto
        if proto is None or proto.transport is None:
            proto = await self._connect()
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        self._buffer.append(_pack(args))
        self._batch.append(fut)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await fut

    async def close(self) -> None:
        proto, self._proto = self._proto, None
        if proto is not None and proto.transport is not None:
            proto.transport.close()
            proto.abort("client closed")
        await asyncio.sleep(0)

    # -- internals ---------------------------------------------------------------
    def _flush(self) -> None:
        self._flush_scheduled = False
        buffer, self._buffer = self._buffer, []
        batch, self._batch = self._batch, []
        proto = self._proto
        if proto is None or proto.transport is None:
            for fut in batch:
                if not fut.done():
                    fut.set_exception(RedisUnavailable("not connected"))
            return
        proto.waiters.extend(batch)
        proto.transport.write(b"".join(buffer))
        assert self._loop is not None
        self._loop.call_later(self._timeout, self._check_answered, proto, batch[-1])

    def _check_answered(self, proto: _Protocol, last: asyncio.Future[Any]) -> None:
        if not last.done() and proto is self._proto:
            self._last_failure = time.monotonic()
            proto.abort(f"no answer within {self._timeout * 1000:.0f} ms")

    def _lost(self, proto: _Protocol) -> None:
        if proto is self._proto:
            self._proto = None
            self._last_failure = time.monotonic()

    async def _connect(self) -> _Protocol:
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        if time.monotonic() - self._last_failure < self._retry_interval:
            raise RedisUnavailable("reconnect backoff")
        self._loop = asyncio.get_running_loop()
        self._connecting = self._loop.create_future()
        try:
            proto = await asyncio.wait_for(self._open(), self._connect_timeout)
        except (OSError, TimeoutError, RedisUnavailable) as exc:
            self._last_failure = time.monotonic()
            err = (
                exc
                if isinstance(exc, RedisUnavailable)
                else RedisUnavailable(f"cannot connect: {exc!r}")
            )
            self._connecting.set_exception(err)
            self._connecting.exception()  # mark retrieved
            self._connecting = None
            raise err from None
        self._proto = proto
        self._connecting.set_result(proto)
        self._connecting = None
        self._failed.ok()  # a new connection after a logged failure: say it recovered
        return proto

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        ep = self._endpoint
        proto = _Protocol(self)
        if ep.path:
            await loop.create_unix_connection(lambda: proto, ep.path)
        else:
            await loop.create_connection(
                lambda: proto,
                ep.host,
                ep.port,
                ssl=ep.ssl,
                server_hostname=ep.host if ep.ssl is not None else None,
            )
        for cmd in ep.setup_commands():
            fut: asyncio.Future[Any] = loop.create_future()
            proto.waiters.append(fut)
            assert proto.transport is not None
            proto.transport.write(_pack(cmd))
            reply = await fut
            if isinstance(reply, hiredis.ReplyError):
                proto.abort("setup failed")
                raise RedisUnavailable(f"{cmd[0]} failed: {reply}")
        return proto
