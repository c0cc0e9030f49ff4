"""The deliverer: claims due deliveries from the Redis queue and POSTs them, signed.

Every gateway process runs one. An attempt is one POST with aiohttp's client:
a short total timeout (``alerts.timeout_s``), no redirects (a 3xx fails the
attempt), the connector's resolver refusing non-public addresses unless
``alerts.allow_private_targets`` (gateway.alerts.targets), no proxy from the
environment. A 2xx answer delivers; anything else is retried after
``retry_base_s``, twice that, ... (at most an hour apart) until
``retry_for_s`` after the delivery was queued, then it is given up as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from gateway.alerts import queue
from gateway.alerts.signing import HEADER, header_value
from gateway.alerts.targets import PublicResolver, TargetRefused, check_host
from gateway.config import AlertsConfig
from gateway.redis import keyspace as ks

log = logging.getLogger("gateway.alerts")

MAX_BACKOFF_S = 3600.0
POLL_S = 1.0  # how often an idle deliverer looks at the queue
PARALLEL = 8  # attempts in flight per process
USER_AGENT = "rpc-gateway-webhooks/1"


def backoff_s(base_s: float, attempts: int) -> float:
    """The wait after the ``attempts``-th failed attempt: base, 2 base, 4 base, ... <= 1 h."""
    return float(min(MAX_BACKOFF_S, base_s * 2 ** min(attempts - 1, 30)))


class Deliverer:
    """Claims and attempts deliveries until cancelled; ``wake()`` looks at once."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        cfg: AlertsConfig,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._cfg = cfg
        self._clock_ms = clock_ms
        self._claim = redis.register_script(queue.CLAIM_LUA)
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(PARALLEL)
        self._tasks: set[asyncio.Task[None]] = set()
        # long enough for an attempt to finish well inside it: only a process
        # that died mid-attempt lets another one try the same delivery again
        self._lease_ms = int((2 * cfg.timeout_s + 30) * 1000)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(
            resolver=None if self._cfg.allow_private_targets else PublicResolver(),
            limit=PARALLEL * 2,
        )
        timeout = aiohttp.ClientTimeout(total=self._cfg.timeout_s)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, trust_env=False, auto_decompress=False
        ) as http:
            # a cancellation swallowed inside a redis-py command (see
            # gateway.redis.flushing) still ends the loop: it checks cancelling()
            me = asyncio.current_task()
            try:
                while me is None or not me.cancelling():
                    await self._slots.acquire()
                    try:
                        claimed = await self._claim(
                            keys=[ks.alert_queue(self._prefix)],
                            args=[self._clock_ms(), self._lease_ms],
                        )
                    except Exception as exc:  # Redis away: try again later
                        self._slots.release()
                        log.warning("alert queue not read: %s", exc)
                        await self._idle()
                        continue
                    if not claimed:
                        self._slots.release()
                        await self._idle()
                        continue
                    task = asyncio.create_task(self._attempt_one(http, str(claimed)))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            finally:
                for task in list(self._tasks):
                    task.cancel()
                for task in list(self._tasks):
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _idle(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), POLL_S)
        self._wake.clear()

    async def _attempt_one(self, http: aiohttp.ClientSession, claimed: str) -> None:
        try:
            await self.attempt(http, claimed)
        except Exception as exc:  # the lease lapses and the delivery is tried again
            log.warning("alert delivery not settled: %s", exc)
        finally:
            self._slots.release()

    async def attempt(self, http: aiohttp.ClientSession, claimed: str) -> None:
        account_id, delivery_id = queue.split_member(claimed)
        p = self._prefix
        record = await queue.load(self._redis, p, account_id, delivery_id)
        if record is None:  # expired or never whole: nothing to deliver
            await self._redis.zrem(ks.alert_queue(p), claimed)
            return
        raw = await self._redis.hget(ks.alert_webhooks(p, account_id), record["webhook"])
        now = self._clock_ms()
        if raw is None:
            record.update(status="dropped", last_error="the webhook was removed", updated_at=now)
            await queue.settle(self._redis, p, account_id, record, None)
            return
        webhook = orjson.loads(raw)
        status, error = await self._post(http, webhook["url"], webhook["secret"], record["body"])
        now = self._clock_ms()
        record["attempts"] += 1
        record.update(http_status=status, last_error=error, updated_at=now)
        if status is not None and 200 <= status < 300:
            record.update(status="delivered", last_error="")
            await queue.settle(self._redis, p, account_id, record, None)
            return
        due = now + int(backoff_s(self._cfg.retry_base_s, record["attempts"]) * 1000)
        if due - record["created_at"] > self._cfg.retry_for_s * 1000:
            record.update(status="failed", next_at=None)
            await queue.settle(self._redis, p, account_id, record, None)
            return
        record["next_at"] = due
        await queue.settle(self._redis, p, account_id, record, due)

    async def _post(
        self, http: aiohttp.ClientSession, url: str, secret: str, body: dict[str, Any]
    ) -> tuple[int | None, str]:
        """(HTTP status or None, what went wrong or "")."""
        data = orjson.dumps(body)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            HEADER: header_value(secret, data),
            "X-Gateway-Event": str(body.get("id", "")),
        }
        try:
            check_host(urlsplit(url).hostname or "", self._cfg.allow_private_targets)
            async with http.post(url, data=data, headers=headers, allow_redirects=False) as resp:
                await resp.content.readany()  # a little of the answer; never all of it
                if 200 <= resp.status < 300:
                    return resp.status, ""
                if 300 <= resp.status < 400:
                    return resp.status, f"HTTP {resp.status} (redirects are not followed)"
                return resp.status, f"HTTP {resp.status}"
        except TargetRefused as exc:
            return None, str(exc)
        except TimeoutError:
            return None, f"no answer within {self._cfg.timeout_s:g} s"
        except aiohttp.ClientError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
        except OSError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
