"""The documentation: a strict MkDocs build, every page in the nav, generated pages that match the code,
and a README that stays a front page."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, suite

import variants
from suite.cli import COMMANDS
from suite.parser import build_parser
from suite.present import cli_page, site

pytestmark = pytest.mark.slow  # the MkDocs build and `suite docs` in subprocesses (the fast lane: pytest -m "not slow")

DOCS = ROOT / "docs"
HAND_WRITTEN_TOPICS = (
    "index",
    "install",
    "running",
    "shapes",
    "report",
    "regression",
    "gpu",
    "scale",
    "api",
    "native",
    "layout",
    "CLAIMS",
    "TRITON",
)  # history.md is a study: its tables name their script


def _nav_pages(nav) -> list[str]:
    out = []
    for entry in nav:
        value = entry if isinstance(entry, str) else next(iter(entry.values()))
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_mkdocs_build_strict_passes(tmp_path):
    """No broken link or anchor, no page outside the nav (mkdocs.yml's validation turns each into a warning,
    which --strict makes an error). Needs the docs extra, as the README's test command installs it."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.fail('mkdocs is missing: pip install -c constraints.txt -e ".[docs]"')
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "runs" / "index.html").is_file()


def test_every_page_is_in_the_nav():
    nav = set(_nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - nav == set() and nav - pages == set()


def test_generated_pages_match_the_code_and_the_run_folders():
    """`python -m suite docs --check` in a fresh process (this one's registry may hold test plugins)."""
    res = suite("docs", "--check", cwd=ROOT)
    assert res.returncode == 0, f"run `python -m suite docs`:\n{res.stdout}{res.stderr}"


def test_every_registered_variant_implementation_and_option_is_on_the_pages():
    code = "import json, variants; print(json.dumps({n: list(variants.get(n).impls) for n in variants.names()}))"
    registry = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    )
    readme, index = (ROOT / "README.md").read_text(), (DOCS / "variants/index.md").read_text()
    missing = []
    for name, impls in registry.items():
        page = DOCS / "variants" / f"{name}.md"
        text = page.read_text() if page.is_file() else ""
        missing += [f"{name}: its page"] * (not text) + [
            f"{name}/{impl}" for impl in impls if f"| `{impl}` |" not in text
        ]
        missing += [f"{name}: README"] * (f"(docs/variants/{name}.md)" not in readme)
        missing += [f"{name}: index"] * (f"({name}.md)" not in index)
    cli = (DOCS / "cli.md").read_text()
    sections = dict(re.findall(r"^## `(\w+)`\n(.*?)(?=^## |\Z)", cli, flags=re.M | re.S))
    for command, option in cli_page.options(build_parser(COMMANDS)):
        text = sections.get(command, "") if command else cli.split("\n## ")[0]
        missing += [f"{command or 'suite'} {option}"] * (not re.search(rf"[`\s]{re.escape(option)}[ `,]", text))
    assert missing == []


def test_the_check_sees_a_new_variant_option_or_card(tmp_path):
    """The check can fail: a variant registered, an option added, a card's page gone."""
    shutil.copytree(DOCS, tmp_path / "docs")
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for other in set(site.cards(tmp_path)) - {"cpu-smoke"}:  # one card is enough (each is analysed 3 times below)
        shutil.rmtree(tmp_path / site.RUNS / other)
        (tmp_path / site.RUNS / f"{other}.md").unlink()
    (tmp_path / "docs/runs/cpu-smoke.md").unlink()
    parser = build_parser(COMMANDS)
    parser.add_argument("--brand-new")
    variants.register(dataclasses.replace(variants.get("full"), name="zz_throwaway"))
    try:
        stale = {str(p.relative_to(tmp_path)) for p in site.stale(tmp_path, parser)}
    finally:
        variants.rules.registry._REGISTRY.pop("zz_throwaway")
    assert {
        "docs/variants/zz_throwaway.md",
        "docs/variants/index.md",
        "README.md",
        "mkdocs.yml",
        "docs/cli.md",
        "docs/runs/cpu-smoke.md",
    } <= stale
    assert site.write(tmp_path, build_parser(COMMANDS)) and site.stale(tmp_path, build_parser(COMMANDS)) == []


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "no dated timings: they go to the changelog or a card"
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text), "no commit ids"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"


def test_the_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci/run").read_text().splitlines()[-1].replace(" -q ", " ").replace("-q -c", "-c")
    assert ci in readme, ci


TIMING = re.compile(r"\d\s?(ms|µs|GFLOP/s|TFLOP/s|GB/s|min\b|minutes)")


def test_no_figure_in_a_topic_page_without_its_card():
    """A measured figure in a hand-written page sits in a paragraph that links to a run card; the rest
    live in the cards, the performance notes and the changelog."""
    loose = []
    for name in HAND_WRITTEN_TOPICS:
        for block in re.split(r"\n\s*\n", (DOCS / f"{name}.md").read_text()):
            if TIMING.search(block) and "runs/" not in block and not block.lstrip().startswith("```"):
                loose.append(f"{name}.md: {block.strip()[:80]}")
    assert loose == []


def test_the_front_picture_is_drawn_from_a_card_and_checked(monkeypatch):
    """The README's figure comes from a card's run by `suite docs` (its variants in that run); a missing one is stale."""
    run = site.cards(ROOT)[site.FIGURE_CARD]
    assert set(site.FIGURE_VARIANTS) <= set(run.read_table()["variant"])
    assert (
        site.FIGURE in (ROOT / "README.md").read_text() and "python -m suite docs" in (ROOT / "README.md").read_text()
    )
    monkeypatch.setattr(site, "FIGURE", "docs/img/no-such-figure.png")
    assert ROOT / "docs/img/no-such-figure.png" in site.stale(ROOT, build_parser(COMMANDS))
