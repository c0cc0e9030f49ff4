"""``gateway config check [FILE] [--json]``: the check's findings, printed.

Exit 2 when the config has mistakes (each on stderr, ``gateway: config
error: PATH: ...``), else 0 with a one-line summary; the Redis URL in it is
shown without credentials. A network left on the shipped public endpoint is
a warning (``gateway: config warning: PATH: ...``), not a mistake. The
check itself lives in ``configcheck``.
"""

from __future__ import annotations

import os
import sys

import orjson

from gateway.cli.configcheck import check, public_defaults
from gateway.cli.storecall import safe_url


def config_check_command(path: str | None, *, json_out: bool) -> int:
    name = path or os.environ.get("GATEWAY_CONFIG") or "(built-in defaults)"
    cfg, problems = check(path)
    warnings = public_defaults(path)
    if json_out:
        value = {"file": name, "ok": not problems, "errors": problems, "warnings": warnings}
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 2 if problems else 0
    for warning in warnings:  # not mistakes: the exit status stays 0 for them alone
        print(f"gateway: config warning: {warning}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(f"gateway: config error: {problem}", file=sys.stderr)
    else:
        assert cfg is not None
        upstreams = sum(len(n.upstreams) for n in cfg.networks)
        redis = safe_url(cfg.redis.url) if cfg.redis.url else "embedded"
        print(
            f"{name}: ok ({len(cfg.networks)} networks, {upstreams} upstreams, "
            f"redis {redis}, {cfg.server.workers} worker(s) on "
            f"{cfg.server.host}:{cfg.server.port})"
        )
    return 2 if problems else 0
