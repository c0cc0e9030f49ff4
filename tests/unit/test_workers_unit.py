"""Pieces of ``serve --workers`` that need no process: the worker environment, the parent watch."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from gateway.server.runner import _watch_parent
from gateway.server.workers import worker_env


def test_worker_env_drops_every_config_variable() -> None:
    env = worker_env(
        {
            "PATH": "/usr/bin",
            "GATEWAY_LOG_LEVEL": "INFO",
            "GATEWAY_CONFIG": "/etc/gateway.toml",
            "GATEWAY_REDIS_URL": "redis://:s3cret@redis:6379/0",
            "GATEWAY_UPSTREAM_BSC": "https://node.example/provider-key",
            "GATEWAY_WORKER_CONFIG": '{"redis": {"url": "redis://:s3cret@x"}}',
        },
        "/tmp/prom",
    )
    assert env == {
        "PATH": "/usr/bin",
        "GATEWAY_LOG_LEVEL": "INFO",
        "PROMETHEUS_MULTIPROC_DIR": "/tmp/prom",
    }


async def test_parent_watch_stops_when_the_parent_is_not_ours() -> None:
    """The fallback to PR_SET_PDEATHSIG: a changed parent pid means the supervisor is gone."""
    stop = asyncio.Event()
    await asyncio.wait_for(_watch_parent(os.getppid() + 1_000_000, stop, interval_s=0.01), 2)
    assert stop.is_set()


@pytest.mark.slow
async def test_parent_watch_keeps_quiet_while_the_parent_lives() -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(_watch_parent(os.getppid(), stop, interval_s=0.01))
    await asyncio.sleep(0.1)
    assert not stop.is_set() and not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
