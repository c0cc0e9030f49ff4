"""The operator CLI, run in-process against a live Redis (and a live gateway)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli.main import main
from gateway.cli.parser import parse_duration_ms
from tests.helpers.config import Cli, Client
from tests.helpers.lease import until_status


def test_durations() -> None:
    assert parse_duration_ms("30d") == 30 * 86_400_000
    assert parse_duration_ms("24h") == 86_400_000
    assert parse_duration_ms("0") == 0
    assert parse_duration_ms("1.5s") == 1500


def test_account_key_lifecycle(cli: Cli) -> None:
    code, out, _ = cli(
        "accounts",
        "create",
        "ops@example.com",
        "--plan",
        "payg",
        "--json",
        stdin="a long password\n",
    )
    assert code == 0 and orjson.loads(out)["plan"] == "payg"

    code, out, _ = cli(
        "keys",
        "create",
        "--account",
        "ops@example.com",
        "--name",
        "web",
        "--env",
        "staging",
        "--expires-in",
        "30d",
    )
    assert code == 0
    key = out.strip().splitlines()[-1]
    assert len(key) == 32 and key.isalnum()

    code, out, _ = cli("keys", "create", "--account", "ops@example.com", "--json")
    created = orjson.loads(out)
    assert created["status"] == "active" and len(created["key"]) == 32

    code, out, _ = cli("keys", "list", "--account", "ops@example.com", "--json")
    listed = orjson.loads(out)
    assert len(listed) == 2 and all("key" not in k for k in listed)
    assert key not in out and created["key"] not in out
    web = next(k for k in listed if k["name"] == "web")
    assert web["env"] == "staging" and web["expires_at"] is not None

    code, out, _ = cli("keys", "rotate", web["id"], "--grace", "1h", "--json")
    rotated = orjson.loads(out)
    assert code == 0 and rotated["replaces"] == web["id"] and rotated["key"] != key

    code, out, _ = cli("keys", "revoke", created["id"], "--json")
    assert code == 0 and orjson.loads(out)["status"] == "revoked"

    code, out, _ = cli("usage", created["id"], "--since", "1h", "--json")
    assert code == 0 and orjson.loads(out)["requests"] == 0

    code, out, _ = cli("accounts", "plan", "ops@example.com", "free")
    assert code == 0 and "free" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (("keys", "list", "--account", "ghost@example.com"), "no account"),
        (("keys", "revoke", "key_doesnotexist"), "no key"),
        (("keys", "rotate", "key_doesnotexist"), "no key"),
        (("usage", "key_doesnotexist"), "no key"),
        (("keys", "create", "--account", "ghost@example.com"), "no account"),
    ],
)
def test_errors_exit_non_zero_with_a_message(cli: Cli, args: tuple[str, ...], needle: str) -> None:
    code, out, err = cli(*args)
    assert code == 1 and needle in err and out == ""


def test_bad_config_names_the_path(
    cli: Cli, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[networks.bsc]\nupstreams = ["ftp://x"]\n')
    monkeypatch.setenv("GATEWAY_CONFIG", str(bad))
    code, _, err = cli("keys", "list", "--account", "x@example.com")
    assert code == 2 and "networks.bsc.upstreams[0]" in err


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["keys", "rotate", "--help"])
    assert exc.value.code == 0
    assert "grace" in capsys.readouterr().out


async def test_cli_key_works_on_a_live_gateway(cli: Cli, client: Client) -> None:
    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        # the CLI runs its own event loop, so it gets a thread of its own here
        return cli(*args, stdin=stdin)

    await asyncio.to_thread(
        run, "accounts", "create", "live@example.com", stdin="a long password\n"
    )
    _, out, _ = await asyncio.to_thread(run, "keys", "create", "--account", "live@example.com")
    key = out.strip().splitlines()[-1]
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}
    resp = await client.post(f"/bsc/{key}", json=body)
    assert resp.status == 200
    _, out, _ = await asyncio.to_thread(
        run, "keys", "list", "--account", "live@example.com", "--json"
    )
    key_id = orjson.loads(out)[0]["id"]
    await asyncio.to_thread(run, "keys", "revoke", key_id)

    async def status() -> int:
        return (await client.post(f"/bsc/{key}", json=body)).status

    await until_status(status, 401)  # every process hears of it within a second


def test_config_option_before_or_after_the_command(cli: Cli, tmp_path: Any) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nmax_batch = -1\n")
    for args in (
        ("--config", str(bad), "keys", "list", "--account", "x@example.com"),
        ("keys", "list", "--account", "x@example.com", "--config", str(bad)),
    ):
        code, _, err = cli(*args)
        assert code == 2 and "limits.max_batch" in err


# -- abbreviations, --version, config check, accounts list, bad URLs -------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("serve", "--worker", "2"), "unrecognized arguments: --worker 2"),
        (("--conf", "x.toml", "keys", "list"), "invalid choice: 'x.toml'"),
        (("keys", "list", "--acc", "a@example.com"), "the following arguments are required"),
        (("keys", "rotate", "key_x", "--gra", "1h"), "unrecognized arguments: --gra 1h"),
    ],
)
def test_abbreviated_options_are_refused(
    args: tuple[str, ...], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``serve --worker 2`` started two workers (argparse prefix matching)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gateway {version('rpc-gateway')}"


@pytest.mark.parametrize(
    "url", ["htp://x", "http://127.0.0.1:6379", "redis://:pw-in-url@host:notaport/0", "redis://"]
)
def test_bad_redis_url_is_one_line(cli: Cli, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Before: ``GATEWAY_REDIS_URL=htp://x gateway keys list`` printed a 25-line traceback."""
    monkeypatch.setenv("GATEWAY_REDIS_URL", url)
    code, out, err = cli("keys", "list", "--account", "a@example.com")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gateway: config error: redis.url (from GATEWAY_REDIS_URL): ")
    assert "pw-in-url" not in err


def test_config_check_lists_every_mistake_with_its_path(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "bogus = 1\n"
        '[server]\nport = "x"\nmetrics_listen = "nope"\ntrusted_proxies = ["1.2.3.4/99"]\n'
        "[limits]\nmax_batch = -1\n"
        '[networks.bsc]\nupstreams = ["ftp://x"]\n'
        "[cache]\nmax_entry_bytes = 999999999999\n"
    )
    monkeypatch.setenv("GATEWAY_REDIS_URL", "htp://x")
    monkeypatch.setenv("GATEWAY_UPSTREAM_OPBNB", "not a url")
    code, out, err = cli("config", "check", str(bad))
    assert code == 2 and out == ""
    found = sorted(line.split(": ")[2] for line in err.strip().splitlines())
    assert found == sorted(
        [
            "bogus",
            "server.port",
            "server.metrics_listen",
            "server.trusted_proxies[0]",
            "limits.max_batch",
            "networks.bsc.upstreams[0]",
            "networks.opbnb.upstreams[0]",
            "cache.max_entry_bytes",
            "redis.url (from GATEWAY_REDIS_URL)",
        ]
    ), err
    code, out, _ = cli("config", "check", str(bad), "--json")
    report = orjson.loads(out)
    assert code == 2 and report["ok"] is False and len(report["errors"]) == 9


@pytest.mark.parametrize(
    "shipped", ["gateway.example.toml", "deploy/gateway.toml", "deploy/k8s/base/gateway.toml"]
)
def test_config_check_passes_every_shipped_config(cli: Cli, shipped: str) -> None:
    code, out, err = cli("config", "check", str(ROOT / shipped))
    assert (code, err) == (0, "")
    assert out.startswith(f"{ROOT / shipped}: ok (")


def test_config_check_of_a_missing_or_broken_file(cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("config", "check", str(tmp_path / "nope.toml"))
    assert code == 2 and err.strip().endswith("config file not found")
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    code, _, err = cli("config", "check", str(broken))
    assert code == 2 and "not valid TOML" in err and len(err.strip().splitlines()) == 1


def test_accounts_list(cli: Cli) -> None:
    code, out, _ = cli("accounts", "list")
    assert (code, out.strip()) == (0, "no accounts")
    for email in ("first@example.com", "second@example.com"):
        assert cli("accounts", "create", email, stdin="a long password\n")[0] == 0
    assert cli("keys", "create", "--account", "second@example.com")[0] == 0
    code, out, _ = cli("accounts", "list", "--json")
    rows = orjson.loads(out)
    assert code == 0
    assert [(r["email"], r["keys"], r["plan"]) for r in rows] == [
        ("first@example.com", 0, "free"),
        ("second@example.com", 1, "free"),
    ]
    code, out, _ = cli("accounts", "list")
    assert "second@example.com" in out.splitlines()[1] and "1 key " in out


def test_bench_without_its_extra_says_how_to_install_it() -> None:
    """Before: a ModuleNotFoundError traceback."""
    blocked = "import sys; sys.modules['tqdm'] = None; import runpy; "
    result = subprocess.run(
        [sys.executable, "-c", blocked + "runpy.run_module('bench', run_name='__main__')"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "pip install 'rpc-gateway[bench]'" in result.stderr
    assert "tqdm is not installed" in result.stderr


@pytest.mark.parametrize(
    "args,needle,code",
    [
        (("keys", "list", "--account", "ghost@example.com"), "no account", 1),
        (("usage", "key_doesnotexist"), "no key", 1),
    ],
)
def test_json_errors_are_json(cli: Cli, args: tuple[str, ...], needle: str, code: int) -> None:
    """With --json a script parses stdout: the error is a JSON object there too."""
    got, out, _ = cli(*args, "--json")
    assert got == code
    body = orjson.loads(out)
    assert needle in body["error"] and body["exit_code"] == code


def test_json_config_error_is_json(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_REDIS_URL", "htp://x")
    code, out, _ = cli("keys", "list", "--account", "a@example.com", "--json")
    assert code == 2 and orjson.loads(out)["error"].startswith("config error: redis.url")


def test_no_redis_and_no_data_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `keys list` against a demo (its Redis in a temp folder) said "no account"
    and left an empty .gateway-data/ in the folder it ran from."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    code = main(["keys", "list", "--account", "demo@example.com"])
    err = capsys.readouterr().err
    assert code == 1 and "GATEWAY_REDIS_URL" in err and "--demo" in err, err
    assert list(tmp_path.iterdir()) == [], "it created files"
