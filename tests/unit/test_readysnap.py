"""The supervisor serves only a fresh worker snapshot of /readyz (gateway.ops.readysnap)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson

from gateway.ops.readysnap import FRESH_S, freshest, network_view

BODY = {
    "ready": True,
    "requires": ["redis", "any_network"],
    "redis": {"ready": True, "address": "redis://r:6379/0"},
    "networks": {"bsc": {"ready": True, "upstreams": []}, "opbnb": {"ready": False}},
}


def _write(folder: Path, pid: int, age_s: float, body: object) -> None:
    path = folder / f"readyz-{pid}.json"
    path.write_bytes(orjson.dumps({"status": 200, "body": body}))
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_the_newest_fresh_snapshot_wins_and_a_stale_one_is_nobody(tmp_path: Path) -> None:
    assert freshest(str(tmp_path)) is None
    _write(tmp_path, 1, FRESH_S + 5, {"who": "dead worker"})
    assert freshest(str(tmp_path)) is None  # a worker that stopped writing says nothing
    _write(tmp_path, 2, 3, {"who": "older"})
    _write(tmp_path, 3, 1, {"who": "newer"})
    snap = freshest(str(tmp_path))
    assert snap is not None and snap["body"] == {"who": "newer"}


def test_one_network_from_the_whole_report() -> None:
    snap = {"status": 200, "body": BODY}
    view, status = network_view(snap, "bsc")
    assert status == 200 and view["network"] == "bsc" and view["redis"]["address"]
    assert network_view(snap, "opbnb")[1] == 503
    assert network_view(snap, "nosuch")[1] == 404
