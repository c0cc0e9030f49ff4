"""Run a test module against both doors (``server.door``: "app" and "lean").

Import ``both_doors`` and ``door_make_config`` into a test module: every test there that
builds its config with ``make_config`` then runs once per door, with the
same assertions. The ``make_config`` here wraps the shared one and sets
``server.door`` unless the test set it itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.config import MakeConfig

DOORS = ("app", "lean")


@pytest.fixture(name="door", params=DOORS)
def both_doors(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(name="make_config")
def door_make_config(make_config: MakeConfig, door: str) -> MakeConfig:
    base = make_config

    def make(raw: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        raw = dict(raw or {})
        raw["server"] = {"door": door, **raw.get("server", {})}
        return base(raw, **kwargs)

    return make
