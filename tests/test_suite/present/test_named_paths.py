"""Every repository path a current page or script names exists: a file moved without its mentions (a lease's
script calling a test that moved) fails here, not on a GPU. The performance notes and the changelog are
history: they name the files of their day (and `suite ab`'s driver names an old checkout's server on purpose)."""

from __future__ import annotations

import re

from helpers import ROOT

PATH = re.compile(r"\b((?:tests|suite|variants|benchmarks)/[A-Za-z0-9_/]+\.(?:py|sh|toml))\b")
HISTORY = {"performance.md", "changelog.md", "NOTES.md"}


def _readers():
    yield from (ROOT / "docs").glob("*.md")
    yield ROOT / "README.md"
    yield from (ROOT / "benchmarks").glob("*.sh")
    yield from (ROOT / "benchmarks").glob("*.py")
    yield from (ROOT / ".github" / "workflows").glob("*.yml")


def test_every_path_named_in_pages_and_scripts_exists():
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in _readers()
        if page.name not in HISTORY
        for path in sorted(set(PATH.findall(page.read_text())))
        if not (ROOT / path).exists()
    ]
    assert missing == []
