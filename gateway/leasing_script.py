"""The lease script's text and SHA, loaded once (see ``lua/lease.lua``)."""

from __future__ import annotations

import hashlib
from importlib import resources

LEASE_LUA = resources.files("gateway").joinpath("lua/lease.lua").read_text()
LEASE_SHA = hashlib.sha1(LEASE_LUA.encode()).hexdigest()
