"""`suite docs`: every page the documentation takes from the code, written or checked.

Generated: the variant pages and their table (from the registry), the command-line reference (from the
parser), the run cards (each from its folder under docs/runs/), the runs' index, the front picture (the
verdict figure of one card's run), the README's variants table and the two lists in mkdocs.yml's nav that
follow the registry and the cards. Each marked block of a
hand-written file (README.md, mkdocs.yml) sits between a `begin generated: KEY` and an `end generated: KEY` line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import variants
from suite.errors import UsageError, check_name
from suite.present import card, cli_page, variant_pages
from suite.present import markdown as md
from suite.store import atomic
from suite.store.rundir import RunDir

RUNS = "docs/runs"
# The README's and the docs' front picture: the report's verdict figure of one card's run, redrawn by `suite docs`
FIGURE, FIGURE_CARD, FIGURE_VARIANTS = (
    "docs/img/verdicts.png",
    "cpu-full",
    ["full", "sliding_window", "random", "linear"],
)


def cards(root: Path) -> dict[str, RunDir]:
    """Card name -> its run folder: every folder under docs/runs/ that holds a results table."""
    folder = Path(root) / RUNS
    found = sorted(path.parent for path in folder.glob(f"*/{RunDir.PARQUET}"))
    return {check_name(f"{RUNS} folder", path.name): RunDir(path) for path in found}  # NB: names go into mkdocs.yml


def runs_index(runs: dict[str, RunDir]) -> str:
    rows = []
    for name, run in runs.items():
        env, frame = run.env(), run.read_table()
        finished, _ = card.timing(run)
        counts = frame["status"].value_counts()
        reached = len(frame) - int(counts.get("not_run", 0))
        host = env.get("cuda_device") or env.get("cpu_model", "?")
        rows.append(
            [
                f"[{name}]({name}.md)",
                md.code(run.plan().get("grid", "?")),
                host,
                f"torch {env.get('torch', '?')}",
                finished,
                f"{reached} of {len(frame)} reached, {counts.get('ok', 0)} ok",
            ]
        )
    return md.page(
        "# Measured: run cards",
        md.GENERATED.format(command="docs"),
        "Every measured figure in these pages comes from a run card: one page that `python -m suite card` writes "
        "from a run folder's own files (kept beside it in `docs/runs/NAME/`), never typed in. A figure quoted "
        "elsewhere in the docs links to the card it comes from. To add one: `python -m suite card RUN --into "
        "docs/runs`, then `python -m suite docs`.",
        md.table(["card", "grid", "host or GPU", "software", "finished", "cases"], rows) if rows else "No cards yet.",
    )


def _block(text: str, key: str, lines: list[str], path: str) -> str:
    """`text` with the lines between its `begin generated: KEY` and `end generated: KEY` markers replaced."""
    found = re.search(
        rf"^([ \t]*)(\S+) begin generated: {key}\b[^\n]*\n(.*?)^[ \t]*\S+ end generated: {key}\b",
        text,
        flags=re.M | re.S,
    )
    if found is None:
        raise UsageError(f"{path}: no 'begin generated: {key}' … 'end generated: {key}' block")
    indent = found.group(1)
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in lines)
    return text[: found.start(3)] + body + text[found.end(3) :]


def expected(root: Path, parser) -> dict[Path, str]:
    """Path -> the text it should hold, for every generated file and block."""
    root = Path(root)
    out = {root / "docs" / path: text for path, text in variant_pages.pages().items()}
    out[root / "docs/cli.md"] = cli_page.page(parser)
    runs = cards(root)
    out.update({root / RUNS / f"{name}.md": card.card(run, files=name) for name, run in runs.items()})
    out[root / RUNS / "index.md"] = runs_index(runs)
    readme = root / "README.md"
    out[readme] = _block(
        readme.read_text(), "variants", ["", variant_pages.table("docs/variants/{name}.md"), ""], "README.md"
    )
    config = root / "mkdocs.yml"
    nav = _block(
        config.read_text(), "variants", [f"- {name}: variants/{name}.md" for name in variants.names()], "mkdocs.yml"
    )
    out[config] = _block(nav, "runs", [f"- {name}: runs/{name}.md" for name in runs], "mkdocs.yml")
    return out


def _leftovers(root: Path, wanted: dict[Path, str]) -> list[Path]:
    """Generated pages that nothing generates any more (a variant removed, a card's folder gone)."""
    marker = md.GENERATED.split("`")[0]
    pages = list((Path(root) / "docs/variants").glob("*.md")) + list((Path(root) / RUNS).glob("*.md"))
    return [p for p in pages if p not in wanted and p.read_text().find(marker) >= 0]


def stale(root: Path, parser) -> list[Path]:
    """Generated files that differ from what the code and the run folders give (or should not exist); the
    figure only where it is missing (its bytes follow the plotting library's version)."""
    wanted = expected(root, parser)
    wrong = [path for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
    figure = Path(root) / FIGURE
    return wrong + _leftovers(root, wanted) + ([] if figure.is_file() else [figure])


def write(root: Path, parser) -> list[Path]:
    """Bring every generated file up to date; the paths changed."""
    wanted = expected(root, parser)
    leftovers = _leftovers(root, wanted)
    figure = Path(root) / FIGURE
    check_inside(root, [*wanted, *leftovers, figure])
    changed = []
    for path, text in wanted.items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            changed.append(atomic.write_text(path, text))
    for path in leftovers:
        path.unlink()
        changed.append(path)
    run = cards(root).get(FIGURE_CARD)
    if (
        run is not None
    ):  # NB: redrawn every time (a card's files or the figure's code may have changed), kept if the same
        image = card.figure(run, FIGURE_VARIANTS)
        if not figure.is_file() or figure.read_bytes() != image:
            changed.append(atomic.write_bytes(figure, image))
    return changed


def check_inside(root: Path, paths: list[Path]) -> None:
    """UsageError naming the first path that is a symbolic link, or whose folder lies outside `root` once
    links are followed: `suite docs` writes and removes files inside the repository only."""
    top = Path(os.path.realpath(root))
    for path in paths:
        if path.is_symlink():
            raise UsageError(
                f"{path}: a symbolic link (allowed: a plain file inside --root {root}; remove the link and run again)"
            )
        folder = Path(os.path.realpath(path.parent))
        if folder != top and top not in folder.parents:
            raise UsageError(
                f"{path}: its folder is {folder}, outside --root {root} once links are followed "
                f"(allowed: folders inside {top})"
            )
