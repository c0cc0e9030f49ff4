"""Docs and docstrings name only modules, names and files that exist (scripts/check-doc-refs).

Code (gateway/, tests/) and the Markdown docs must be clean. ``CODE_PENDING``
and ``DOCS_PENDING`` (file, reference) may pin a finding while its owner
moves it; they only shrink, and are empty now.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Both lists are empty: a stale reference fails at once. Fix the doc rather
# than pin it here.
CODE_PENDING: set[tuple[str, str]] = set()

DOCS_PENDING: set[tuple[str, str]] = set()


def _checker() -> ModuleType:
    path = ROOT / "scripts" / "check-doc-refs"
    loader = importlib.machinery.SourceFileLoader("check_doc_refs", str(path))
    spec = importlib.util.spec_from_loader("check_doc_refs", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def found() -> set[tuple[str, str]]:
    return {(f.file, f.ref) for f in _checker().check(ROOT)}


@pytest.mark.slow  # imports every module named, reads every doc
def test_code_names_only_what_exists(found: set[tuple[str, str]]) -> None:
    code = {f for f in found if f[0].startswith(("gateway/", "tests/"))}
    assert code == CODE_PENDING


@pytest.mark.slow
def test_docs_findings_only_shrink(found: set[tuple[str, str]]) -> None:
    docs = {f for f in found if not f[0].startswith(("gateway/", "tests/"))}
    assert docs - DOCS_PENDING == set(), "new stale references in the docs"
    assert DOCS_PENDING - docs == set(), "fixed: take them off DOCS_PENDING"


def test_the_checker_finds_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text(
        "Exists: `gateway.limits.leasing.LeaseLimiter.invalidate`, [b](B.md),\n"
        "`gateway.store.keyevents.KeyEvents.ready` (set in __init__), docs/A.md,\n"
        "the `gateway.access` log.\n"
        "Missing: `gateway.limits.leasing.Nope`, gateway/nope.py, [c](C.md#x).\n"
    )
    (tmp_path / "docs" / "B.md").write_text(
        "Made by npm ci, not shipped: tests/js/node_modules/ethers; not: bench/node_modules.\n"
        "Errors follow SPEC §4 (issue 21), measured after the merge; the spec: fine.\n"
    )
    (tmp_path / "tests" / "js").mkdir(parents=True)
    (tmp_path / "tests" / "js" / "package.json").write_text("{}")
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "logs.py").write_text(
        'log = logging.getLogger("gateway.access")\n'
        'x = "SPEC section 4 in a string is code, not prose"\n'
        "# a comment citing SPEC\n"
    )
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.py").write_text('"""Measures what issue 14 asks."""\n')
    got = {(f.line, f.ref) for f in _checker().check(tmp_path)}
    assert got == {
        (4, "gateway.limits.leasing.Nope"),
        (4, "gateway/nope.py"),
        (4, "C.md"),
        (1, "bench/node_modules"),
        (2, "SPEC"),
        (2, "issue 21"),
        (2, "after the merge"),
        (3, "SPEC"),
        (1, "issue 14"),
    }
