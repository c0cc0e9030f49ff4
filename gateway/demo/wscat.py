"""A tiny WebSocket client for the demo's banner: send one JSON-RPC frame, print what comes back.

``python -m gateway.demo.wscat URL FRAME [--count N] [--seconds S]`` opens
``URL``, sends ``FRAME`` as one text frame and prints every text frame it
receives, one a line, until ``--count`` frames came, ``--seconds`` passed, the
server closed, or Ctrl-C. The banner names it instead of a separate tool
(websocat, wscat) because what ``pip install .`` installed must be enough to
run every line the demo prints; it uses aiohttp's client, already a dependency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence

import aiohttp


async def run(url: str, frame: str, count: int = 0, seconds: float = 0.0) -> int:
    """Send ``frame`` on ``url``; print text frames received. Returns the exit status."""
    received = 0
    try:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await ws.send_str(frame)
            async with asyncio.timeout(seconds or None):
                async for msg in ws:
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        break
                    print(msg.data, flush=True)
                    received += 1
                    if count and received >= count:
                        break
    except TimeoutError:
        return 0 if received else 1
    except aiohttp.WSServerHandshakeError as exc:
        print(f"wscat: {url}: the server refused the WebSocket ({exc.status})", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError) as exc:
        print(f"wscat: {url}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.demo.wscat",
        description="Send one JSON-RPC frame over a WebSocket and print the answers.",
    )
    parser.add_argument("url", help="ws:// or wss:// URL (the key in the path)")
    parser.add_argument("frame", help="the JSON-RPC call to send, as text")
    parser.add_argument("-n", "--count", type=int, default=0, help="stop after N frames")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after S seconds")
    args = parser.parse_args(argv)
    if args.count < 0 or args.seconds < 0:
        parser.error("--count and --seconds must be >= 0")
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(args.url, args.frame, args.count, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
