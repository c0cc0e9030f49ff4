"""One ``<prefix>:keys`` subscription per process, shared by its listeners; failures logged.

The leased admission's record cache and the WebSocket service's revocation
check both listen through ``store.keyevents.KeyEvents``: a second
subscription would be a second reconnect loop and a second place to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import pytest
from redis.asyncio import Redis

from gateway import typedefs as T
from gateway.redis.clients import pubsub_connect
from gateway.redis.embedded import free_port
from gateway.redis.keyspace import keys_channel
from gateway.store.accounts import Store
from gateway.store.keyevents import KeyEvents
from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually


async def test_one_subscription_serves_admission_and_websockets(
    stack: WsStack,
    http: aiohttp.ClientSession,
    redis: Redis,
    prefix: str,
    store: Store,
    account: str,
) -> None:
    await stack.app[T.KEY_EVENTS].ready.wait()
    await asyncio.sleep(0.3)  # any other subscriber started with the app has subscribed by now
    [(_, subscribers)] = await redis.pubsub_numsub(keys_channel(prefix))
    assert subscribers == 1  # one worker, one subscription (was two with the WS service's own)
    key, record = await store.create_key(account)
    async with http.ws_connect(f"{stack.ws}/bsc/{key}") as ws:
        await eventually(lambda: len(stack.app[WS].sessions) == 1)
        await store.revoke_key(record.id)  # publishes on <prefix>:keys
        msg = await ws.receive(timeout=5)
        assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == 4001


async def _run_for(events: KeyEvents, seconds: float) -> None:
    task = asyncio.create_task(events.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(("interval_s", "rate_limited"), [(60.0, True), (0.0, False)])
async def test_a_lost_subscription_is_logged_with_address_class_and_message_rate_limited(
    caplog: pytest.LogCaptureFixture, interval_s: float, rate_limited: bool
) -> None:
    port = free_port()  # nothing listens there
    attempts = 0

    def connect() -> Redis:
        nonlocal attempts
        attempts += 1
        return pubsub_connect(f"redis://:s3cret@127.0.0.1:{port}/0")

    events = KeyEvents(connect, "p", log_interval_s=interval_s)
    with caplog.at_level(logging.WARNING, logger="gateway.keyevents"):
        await _run_for(events, 1.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.keyevents"]
    assert attempts >= 3  # backoff 0.1, 0.2, 0.4 s
    assert len(lines) == (1 if rate_limited else attempts), lines
    assert f"redis=127.0.0.1:{port}" in lines[0]
    assert "error=ConnectionError" in lines[0]
    assert "Error 111 connecting" in lines[0]  # the message itself
    assert not any("s3cret" in line for line in lines)
    assert not events.ready.is_set()


async def test_a_restored_subscription_says_so_once(
    caplog: pytest.LogCaptureFixture, redis_url: str
) -> None:
    """Two refused connects, then the real Redis: one failure line, one recovery line."""
    port = free_port()  # nothing listens there
    attempts = 0

    def connect() -> Redis:
        nonlocal attempts
        attempts += 1
        return pubsub_connect(f"redis://127.0.0.1:{port}/0" if attempts <= 2 else redis_url)

    events = KeyEvents(connect, "p", log_interval_s=60.0)
    task = asyncio.create_task(events.run())
    with caplog.at_level(logging.INFO, logger="gateway.keyevents"):
        try:
            await eventually(events.ready.is_set, 5.0)
            await asyncio.sleep(0.1)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.keyevents"]
    lost = [line for line in lines if line.startswith("key events lost")]
    back = [line for line in lines if line.startswith("key events restored redis=")]
    assert len(lost) == 1 and "(0 similar failures" in lost[0], lines
    assert len(back) == 1, lines
