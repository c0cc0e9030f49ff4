"""``[admin]`` (tokens by hash, each mistake by its path), the token check, config diffs."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.config.diff import config_changes
from gateway.ops.adminauth import authenticate, check, token_of

HASH = hashlib.sha256(b"s3cret-token").hexdigest()


def _admin(tokens: Any, **more: Any) -> dict[str, Any]:
    return {"admin": {"tokens": tokens, **more}}


def test_tokens_load_with_their_roles() -> None:
    cfg = config_from_dict(
        _admin(
            [
                {"name": "ops", "sha256": HASH.upper(), "role": "write"},
                {"name": "ro", "sha256": "a" * 64},
            ]
        )
    )
    ops, ro = cfg.admin.tokens
    assert (ops.name, ops.sha256, ops.role) == ("ops", HASH, "write")  # hex kept lower case
    assert ro.role == "read"  # the default role
    assert config_from_dict({}).admin.tokens == ()  # none by default: every call is a 401


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_admin([{"name": "ops", "sha256": "s3cret-token"}]), "admin.tokens[0].sha256: expected"),
        (
            _admin([{"name": "a", "sha256": HASH, "role": "root"}]),
            'admin.tokens[0].role: must be "read"',
        ),
        (_admin([{"sha256": HASH}]), "admin.tokens[0].name: expected"),
        (_admin([{"name": "a", "sha256": HASH, "token": "x"}]), "admin.tokens[0].token: unknown"),
        (
            _admin([{"name": "a", "sha256": HASH}, {"name": "a", "sha256": "b" * 64}]),
            "admin.tokens[1].name: 'a' is used twice",
        ),
        (
            _admin([{"name": "a", "sha256": HASH}, {"name": "b", "sha256": HASH}]),
            "admin.tokens[1].sha256: the same token is listed twice",
        ),
        (_admin("ops"), "admin.tokens: expected a list"),
        (_admin([], audit_cap=0), "admin.audit_cap: expected an integer of at least 1"),
        ({"admin": {"token": []}}, "admin.token: unknown config key"),
    ],
)
def test_mistakes_name_their_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict(raw)
    assert str(exc.value).startswith(message)


def test_the_check_takes_only_a_known_token_and_read_tokens_only_read() -> None:
    cfg = config_from_dict(
        _admin(
            [{"name": "ops", "sha256": HASH, "role": "write"}, {"name": "ro", "sha256": "a" * 64}]
        )
    )
    tokens = cfg.admin.tokens
    assert token_of("Bearer abc") == "abc" and token_of("bearer  abc ") == "abc"
    assert token_of("Basic abc") is None and token_of("Bearer ") is None and token_of(None) is None
    found = authenticate(tokens, "Bearer s3cret-token")
    assert found is not None and found.name == "ops"
    assert authenticate(tokens, "Bearer s3cret-tokeN") is None
    assert authenticate(tokens, f"Bearer {HASH}") is None  # the hash itself opens nothing
    assert check((), "Bearer s3cret-token", "GET", "/admin/nodes")[1:] == (
        401,
        "no admin token configured",
    )
    ro = dataclasses.replace(tokens[0], role="read")
    who, status, why = check((ro,), "Bearer s3cret-token", "POST", "/admin/reload")
    assert who == ro and status == 403 and "may only read" in why
    assert check((ro,), "Bearer s3cret-token", "GET", "/admin/nodes")[1] == 0


def test_changes_are_config_paths_never_values() -> None:
    old = config_from_dict({"redis": {"url": "redis://:pw@h:1"}})
    new = config_from_dict(
        {
            "redis": {"url": "redis://:other@h:1"},
            "upstream": {"probe_interval_s": 9.0},
            "networks": {"bsc": {"upstreams": ["http://n.example:8545"]}},
            "plans": {"gold": {"rate": 5}},
            **_admin([{"name": "ops", "sha256": HASH}]),
        }
    )
    changed = config_changes(old, new)
    assert changed == sorted(
        [
            "admin.tokens",
            "networks.bsc.nodes",
            "networks.bsc.upstreams",
            "networks.bsc.ws_upstreams",
            "plans.gold (added)",
            "redis.url",
            "upstream.probe_interval_s",
        ]
    )
    assert config_changes(old, old) == []
    assert not any("pw" in c or "other" in c for c in changed)
