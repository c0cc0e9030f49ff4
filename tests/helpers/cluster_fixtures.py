"""Fixtures that re-point the shared ones (tests/conftest.py) at a Redis Cluster.

A test module imports these and defines ``redis_cluster`` (a started
``tests.helpers.cluster.RedisCluster``); ``redis_url``, ``redis``,
``make_config`` (so ``config``, ``client``, ``store``...), ``limiter`` and
``cli`` then talk to that cluster with ``redis.cluster = true``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from gateway.config import Config, config_from_dict
from gateway.limits.limiter import ADMIT_LUA, ExactLimiter, RedisScript
from tests.helpers.cluster import RedisCluster as ClusterProcesses
from tests.helpers.config import MakeConfig


@pytest.fixture
def redis_url(redis_cluster: ClusterProcesses) -> str:
    return redis_cluster.url  # one node; clients discover the others


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def make_config(make_config: MakeConfig) -> MakeConfig:
    """The shared factory, with ``redis.cluster = true``."""

    def make(raw: dict[str, Any] | None = None, **kw: Any) -> Config:
        raw = dict(raw or {})
        raw["redis"] = {"cluster": True, **raw.get("redis", {})}
        return make_config(raw, **kw)

    return make


@pytest.fixture
def limiter(redis: RedisCluster, prefix: str) -> ExactLimiter:
    """test_limiter.py's plans on the cluster, through redis-py (the mux speaks to one server)."""
    raw = {
        "free": {"rate": 10, "burst": 20, "weights": {"eth_getLogs": 5}},
        "payg": {"rate": 100, "burst": 200},
    }
    plans = config_from_dict({"plans": raw}).plans
    return ExactLimiter(RedisScript(redis, ADMIT_LUA), plans, prefix)


@pytest.fixture
def cli_redis_toml() -> str:
    """The shared ``cli`` fixture, configured for the cluster."""
    return "cluster = true\n"
