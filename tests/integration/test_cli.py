"""The operator CLI, run in-process against a live Redis (and a live gateway)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.cli.main import main, parse_duration_ms
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
