"""A connection disconnected while a command's write is scheduled on it (a real race).

redis-py writes inside ``asyncio.wait_for`` when a socket timeout is set, so a
send first schedules its write and then waits; a disconnect that runs before
the write (as a Cluster client's error handling does to a failed node's
connections) leaves the write without a stream writer.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def closed_under_the_write(conn: Any) -> BaseException | None:
    """Send PING on ``conn`` and disconnect it before the write runs: what the send raised."""
    await conn.connect()
    send = asyncio.create_task(conn.send_packed_command(conn.pack_command("PING")))
    await asyncio.sleep(0)  # the send is inside wait_for now: its write is only scheduled
    await conn.disconnect(nowait=True)  # as another call's error handling does
    try:
        await send
    except BaseException as exc:  # the kind is what the caller checks
        return exc
    return None
