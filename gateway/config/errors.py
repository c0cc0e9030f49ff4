"""``ConfigError``: a config value is wrong (re-exported by schema.py and the package).

Its own module so that a section kept beside schema.py (tracing.py) can raise it
while schema.py imports that section's dataclass.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is wrong; the message starts with its path."""
