"""``gateway config check`` reports every mistake in one run, each with its config path.

It passed ``port = 99999`` and ``workers = 0``, and took a whole list out at
its first bad entry (so a second bad upstream showed only on the next run);
a config naming one network left the other on the public endpoint silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.cli.configcheck import check, public_defaults
from gateway.cli.configcmd import config_check_command

BAD = """
[server]
port = 99999
workers = 0
trusted_proxies = ["1.2.3.4/99", "10.0.0.0/8", "nope"]
[networks.bsc]
upstreams = ["ftp://x", "http://ok:8545", "http://y:99999", { url = "gopher://z" }]
ws_upstreams = ["http://a", "ws://b:8546", "wss://c:70000"]
[plans.free]
rate = 0
burst = 0
"""


def _paths(problems: list[str]) -> list[str]:
    return [p.split(": ", 1)[0] for p in problems]


def test_every_mistake_in_one_run(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD)
    cfg, problems = check(str(path), {})
    assert cfg is None
    assert _paths(problems) == [
        "server.port",
        "server.workers",
        "server.trusted_proxies[0]",
        "server.trusted_proxies[2]",  # the file's index, after [0] was taken out
        "networks.bsc.upstreams[0]",
        "networks.bsc.upstreams[2]",  # a port past 65535
        "networks.bsc.upstreams[3].url",
        "networks.bsc.ws_upstreams[0]",
        "networks.bsc.ws_upstreams[2]",
        "plans.free.rate",
        "plans.free.burst",
    ], problems
    assert problems[0] == "server.port: must be a TCP port, 0 to 65535"
    assert problems[1] == "server.workers: must be at least 1"


def test_a_list_of_only_bad_entries_is_not_also_called_empty(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[networks.bsc]\nupstreams = ["ftp://a", "ftp://b"]\n')
    _, problems = check(str(path), {})
    assert _paths(problems) == ["networks.bsc.upstreams[0]", "networks.bsc.upstreams[1]"]


def test_a_good_config_has_no_problems(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(
        '[server]\nport = 65535\nworkers = 2\n[networks.bsc]\nupstreams = ["http://n:1"]\n'
    )
    cfg, problems = check(str(path), {})
    assert problems == [] and cfg is not None and cfg.server.port == 65535


def test_a_network_left_on_the_public_endpoint_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "partial.toml"
    path.write_text('[networks.bsc]\nupstreams = ["http://my-node:8545"]\n')
    warnings = public_defaults(str(path), {})
    assert len(warnings) == 1 and warnings[0].startswith("networks.opbnb.upstreams: not set")
    assert "https://opbnb-mainnet-rpc.bnbchain.org" in warnings[0]
    # the environment's nodes count as set
    assert public_defaults(str(path), {"GATEWAY_UPSTREAM_OPBNB": "http://o:1"}) == []
    for name in [k for k in os.environ if k.startswith("GATEWAY_")]:
        monkeypatch.delenv(name)
    assert config_check_command(str(path), json_out=False) == 0  # a warning, not a mistake
    err = capsys.readouterr().err
    assert err.startswith("gateway: config warning: networks.opbnb.upstreams: not set"), err


def test_every_mistake_of_each_node_table(tmp_path: Path) -> None:
    """Each field of a node table is checked, not only its first mistake; a missing
    url is named and the entry's other fields are still checked."""
    path = tmp_path / "bad.toml"
    path.write_text(
        "[networks.bsc]\n"
        'upstreams = ["ftp://x", { url = "gopher://z", weight = -1, archive = "yes" },'
        ' { name = "a b" }, "http://ok:1"]\n'
    )
    _, problems = check(str(path), {})
    assert _paths(problems) == [
        "networks.bsc.upstreams[0]",
        "networks.bsc.upstreams[1].weight",
        "networks.bsc.upstreams[1].url",
        "networks.bsc.upstreams[1].archive",
        "networks.bsc.upstreams[2].url",
        "networks.bsc.upstreams[2].name",
    ], problems
    assert "missing" in problems[4]
