"""Transaction settings: defaults, refusals naming the config path, and the trip to workers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.server.workers import config_to_raw


def test_defaults() -> None:
    cfg = config_from_dict({})
    bsc = cfg.network("bsc")
    assert (bsc.tx_broadcast, bsc.private_tx) == ("all", ())
    assert (bsc.tx_per_sender_rate, bsc.tx_per_sender_burst) == (5.0, 20)
    free = cfg.plan("free")
    assert (free.private_tx, free.bundle_rate, free.bundle_burst) == ("off", 1.0, 5)
    assert free.cost("eth_sendBundle") == 16


def _status(fields: dict[str, Any]) -> dict[str, Any]:
    return {"networks": {"bsc": {"private_tx": [{"url": "https://b", **fields}]}}}


def test_a_builder_status_method() -> None:
    entry = {"status_method": "eth_getTxStatus", "status_batch": True}
    builder = config_from_dict(_status(entry)).network("bsc").builders[0]
    assert (builder.status_method, builder.status_batch) == ("eth_getTxStatus", True)
    plain = config_from_dict(_status({})).network("bsc").builders[0]
    assert (plain.status_method, plain.status_batch) == ("", False)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"networks": {"bsc": {"tx_broadcast": "some"}}}, "networks.bsc.tx_broadcast"),
        ({"networks": {"bsc": {"private_tx": "https://b"}}}, "networks.bsc.private_tx"),
        ({"networks": {"bsc": {"private_tx": ["ftp://b"]}}}, "networks.bsc.private_tx[0]"),
        ({"networks": {"bsc": {"tx_per_sender_rate": -1}}}, "networks.bsc.tx_per_sender_rate"),
        ({"networks": {"bsc": {"tx_per_sender_burst": 0}}}, "networks.bsc.tx_per_sender_burst"),
        ({"networks": {"bsc": {"tx_timeout_s": 0}}}, "networks.bsc.tx_timeout_s"),
        ({"plans": {"free": {"rate": 1, "private_tx": "yes"}}}, "plans.free.private_tx"),
        (_status({"status_method": "get status"}), "networks.bsc.private_tx[0].status_method"),
        (_status({"status_method": 1}), "networks.bsc.private_tx[0].status_method"),
        (_status({"status_batch": True}), "networks.bsc.private_tx[0].status_batch"),
        (
            _status({"status_method": "eth_getTxStatus", "status_batch": "yes"}),
            "networks.bsc.private_tx[0].status_batch",
        ),
        ({"plans": {"free": {"rate": 1, "bundle_burst": 0}}}, "plans.free.bundle_burst"),
    ],
)
def test_refusals_name_the_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert str(info.value).startswith(path + ":"), info.value


def test_settings_reach_worker_processes_unchanged() -> None:
    cfg = config_from_dict(
        {
            "networks": {"bsc": {"private_tx": ["https://b.example/x"], "tx_broadcast": "one"}},
            "plans": {"free": {"rate": 5, "private_tx": "fallback", "bundle_rate": 0.5}},
        }
    )
    again = config_from_dict(orjson.loads(orjson.dumps(config_to_raw(cfg))))
    assert again == cfg
    assert again.network("bsc").private_tx == ("https://b.example/x",)
    assert again.plan("free").private_tx == "fallback"
