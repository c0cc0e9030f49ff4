"""A connection closed while a command is being written: redis-py's ConnectionError, not a 500.

A Redis Cluster client that sees a node fail disconnects that node's
connections, some in use by other calls. A call whose write was already
scheduled (redis-py writes inside ``asyncio.wait_for`` when a socket timeout
is set, as the gateway's clients always do) then finds the stream writer gone,
and redis-py let ``AttributeError: 'NoneType' object has no attribute
'writelines'`` through: not a ``RedisError``, so the admission answered 500
("internal error") where a Redis failure answers 503. Found by the hung-primary
failover test in a loaded full run. Here the same race is made on purpose
with a real server and redis-py's own calls: a command's write is scheduled,
then its connection is disconnected before the write runs.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.config import Config
from gateway.redis.clients import connect
from tests.helpers.writerace import closed_under_the_write


async def test_a_write_on_a_connection_closed_under_it_is_a_connection_error(
    config: Config, redis_url: str
) -> None:
    client = connect(config.redis, redis_url)
    try:
        pool: Any = client.connection_pool  # type: ignore[union-attr]
        conn = await pool.get_connection()
        try:
            raised = await closed_under_the_write(conn)
        finally:
            await pool.release(conn)
        assert isinstance(raised, RedisConnectionError), repr(raised)
        assert "closed while writing" in str(raised)
        assert await client.ping()  # the pool makes a fresh connection for the next call
    finally:
        await client.aclose()


async def test_the_race_is_real_on_redis_pys_own_connection(redis_url: str) -> None:
    """The same steps on redis-py's own connection class break the write (then with
    ``AttributeError``), so the test above makes the race and does not pass by luck."""
    plain = Redis.from_url(redis_url, socket_timeout=2)
    try:
        pool: Any = plain.connection_pool
        conn = await pool.get_connection()
        try:
            raised = await closed_under_the_write(conn)
        finally:
            await pool.release(conn)
        assert raised is not None
    finally:
        await plain.aclose()
