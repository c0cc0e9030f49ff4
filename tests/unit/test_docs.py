"""The README and docs/ as a newcomer reads them.

The README stays short (the two commands, a one-screen tour, how to point it
at real nodes, links into docs/), its two commands are exactly the ones CI
runs, the config it shows loads with the real loader, and every relative
link in the docs leads to a file or a heading that exists.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gateway.config import config_from_dict

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted(
    [
        README,
        ROOT / "SECURITY.md",
        ROOT / "CHANGELOG.md",
        ROOT / "bench" / "README.md",
        ROOT / "deploy" / "k8s" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAX_README_LINES = 150  # httpx's README is about this long


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_readme_starts_with_the_two_commands_ci_runs() -> None:
    text = README.read_text()
    assert _blocks(text, "sh")[0] == "pip install . && gateway serve --demo\nscripts/test\n"
    assert "\nscripts/test\n" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_short_with_contents_and_the_promised_sections() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "Contents"
    assert {"Point it at your nodes", "Methods and weights", "Documentation"} <= set(headings)
    methods = text.split("## Methods and weights", 1)[1]
    assert "(docs/METHODS.md)" in methods.split("\n## ", 1)[0]


def test_the_readme_config_loads() -> None:
    """What "Point it at your nodes" shows is a config the gateway accepts."""
    (toml,) = _blocks(README.read_text(), "toml")
    cfg = config_from_dict(tomllib.loads(toml), env={})
    assert {n.name: n.chain_id for n in cfg.networks} == {"bsc": 56, "opbnb": 204}
    assert cfg.redis.url.startswith("rediss://") and cfg.server.workers == 4


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    text = doc.read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto
            continue
        path, _, fragment = target.partition("#")
        if not path:
            if fragment not in anchors:
                broken.append(target)
            continue
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"
