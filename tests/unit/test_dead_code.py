"""No dead code in gateway/: vulture finds nothing the allowlist does not explain.

bench/ is scanned too, as a user of gateway/ (its findings are not judged
here); tests/ is not, so code only the tests use shows up and has to be
either used by the product or listed, with its reason, in
tests/dead_code_allowlist.py. The ``_m_<method>`` handlers of the demo node
are dispatched by name and ignored as a pattern.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vulture import Vulture

ROOT = Path(__file__).resolve().parents[2]
ALLOWLIST = ROOT / "tests" / "dead_code_allowlist.py"


def _unused(*paths: Path) -> list[str]:
    scan = Vulture(ignore_names=["_m_*"])
    scan.scavenge([str(p) for p in (*paths, ALLOWLIST)])
    return [
        f"{Path(item.filename).resolve()}:{item.first_lineno}: {item.message}"
        for item in scan.get_unused_code()
    ]


@pytest.mark.slow  # ~2.5 s: parses all of gateway/ and bench/
def test_gateway_has_no_dead_code() -> None:
    gateway = str(ROOT / "gateway")
    found = [f for f in _unused(ROOT / "gateway", ROOT / "bench") if f.startswith(gateway)]
    assert not found, "dead code (delete it, or allowlist it with a reason):\n" + "\n".join(found)


def test_the_check_finds_dead_code(tmp_path: Path) -> None:
    """The check itself can fail: an unused function in a scanned file is reported."""
    probe = tmp_path / "probe.py"
    probe.write_text("def never_called_anywhere() -> int:\n    return 1\n")
    found = _unused(probe)
    assert any("never_called_anywhere" in line for line in found), found
