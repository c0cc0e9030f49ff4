"""Run a test module against both doors (``server.door``: "app" and "lean").

Import ``door`` and ``make_config`` into a test module: every test there that
builds its config with ``make_config`` then runs once per door, with the
same assertions. The ``make_config`` here wraps the shared one and sets
``server.door`` unless the test set it itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.config import MakeConfig

DOORS = ("app", "lean")


@pytest.fixture(params=DOORS)
def door(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def make_config(make_config: MakeConfig, door: str) -> MakeConfig:
    base = make_config

    def make(raw: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        raw = dict(raw or {})
        raw["server"] = {"door": door, **raw.get("server", {})}
        return base(raw, **kwargs)

    return make  # type: ignore[return-value]
