"""``gateway serve``: the command-line options onto ``gateway.server.runner.serve``.

The runner (aiohttp, uvloop, the workers) is imported only here, when the
server really starts, so the operator commands stay quick to launch. SIGHUP
(and the admin API's ``POST /admin/reload``, which checks it whole first) reloads
the config from the same path it was first read from.
"""

from __future__ import annotations

import argparse
import sys

from gateway.cli.configcheck import check
from gateway.config import Config, listen_address, load_config


def serve_command(args: argparse.Namespace, cfg: Config) -> int:
    from gateway.server.runner import serve

    if args.metrics_listen and listen_address(args.metrics_listen) is None:
        print("gateway: --metrics-listen: expected HOST:PORT", file=sys.stderr)
        return 2
    config_path = args.config
    return serve(
        cfg,
        demo=args.demo,
        host=args.host,
        port=args.port,
        workers=args.workers,
        metrics_listen=args.metrics_listen,
        reload=lambda: load_config(config_path),
        check=lambda: check(config_path),
    )
