"""The shape of the code: the project stands alone, no import cycles, no private name crosses a file, every
declaration registers one variant, modules and functions stay short."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "suite"
VARIANTS = ROOT / "variants"
PACKAGES = ("suite", "variants")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an sdist): every file on disk
        return [p for pattern in patterns for p in ROOT.glob(f"**/{pattern}")]
    return [ROOT / line for line in out.stdout.splitlines()]


def test_nothing_points_outside_the_repository():
    outside = [
        str(p.relative_to(ROOT))
        for p in tracked("*.py", "*.md", "*.toml", "*.j2", "*.yml", ".ci/run")
        if "../shared" in p.read_text(errors="replace") and p.name != "test_layout.py"
    ]
    assert outside == []
    assert (ROOT / "docs" / "CLAIMS.md").is_file()


MAX_FILE_KB = 1024  # a tracked file's limit, as .pre-commit-config.yaml's check-added-large-files has it


def test_no_tracked_file_is_over_a_megabyte():
    """Stored runs and study outputs are kept out of the repository, or trimmed to the rows a test reads
    (tests/data/): a file past the limit is data that belongs in results/ (gitignored)."""
    big = [
        f"{p.relative_to(ROOT)}: {p.stat().st_size} bytes"
        for p in tracked("*")
        if p.is_file() and p.stat().st_size > MAX_FILE_KB * 1024
    ]
    assert big == []
    hook = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "id: check-added-large-files" in hook and f"--maxkb={MAX_FILE_KB}" in hook


def test_benchmarks_holds_no_stored_run():
    """benchmarks/ holds scripts, grids and the small summaries the docs quote; a run folder (its table, its
    journal) is measured again into results/ by the script or `suite run` that makes it, and what a test reads
    of one is a card's run under docs/runs/ or a fixture under tests/data/."""
    runs = [
        str(p.relative_to(ROOT))
        for p in tracked("benchmarks/*")
        if p.name in ("results.parquet", "results.csv", "finished.jsonl", "ab.jsonl", "plan.json", "journal.jsonl")
    ]
    assert runs == []


def _ours(module: str, packages: tuple[str, ...] = PACKAGES) -> bool:
    return module.split(".")[0] in packages


def _imports(path: Path, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """The project modules `path` imports, at any depth of the file (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and _ours(node.module, packages):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _ours(a.name, packages))
    return found


def _sources() -> dict[str, Path]:
    return {_module(p): p for root in (SUITE, VARIANTS) for p in root.rglob("*.py")}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycles_anywhere():
    """Between the modules of suite/ and variants/ (a package's __init__ counts as the package, which
    its own modules may import: Python finishes the package first)."""
    modules = _sources()
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    graph = {name: {m for m in deps if not name.startswith(m + ".")} for name, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(trail + [name, dep])
            if dep not in state:
                visit(dep, trail + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


# The stages of suite/, each importing only those before it; below them what several share (the machine:
# device table, timers, probes; errors and signals). Data flows plan -> run -> store -> analyse -> present;
# imports go plan <- store <- analyse <- run: a sweep writes its journal and table as it goes (store), and
# its adaptive ladders and `compare --confirm` decide what to measure from fits (analyse). The command line
# (cli.py, parser.py, __main__.py) sits on top.
SHARED = ("errors", "signals", "machine")
STAGES = ("plan", "store", "analyse", "run", "present", "history")


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "suite" and parts[1] in SHARED + STAGES else None


def test_stages_import_one_way():
    backwards = []
    for name, path in _sources().items():
        here = _stage(name)
        if here is None:
            continue
        allowed = set(SHARED) if here in SHARED else set(SHARED) | set(STAGES[: STAGES.index(here) + 1])
        backwards += [
            f"{name} -> {m}"
            for m in sorted(_imports(path, ("suite",)))
            if _stage(m) is not None and _stage(m) not in allowed and not (here in SHARED and _stage(m) == here)
        ]
    assert backwards == []


def test_variants_know_nothing_of_the_suite():
    assert [str(p.relative_to(ROOT)) for p in VARIANTS.rglob("*.py") if _imports(p, ("suite",))] == []


def test_no_private_name_is_imported_across_files():
    """`from module import _name` between two files of the project: a private name is the file's own
    (what another file needs is public, in the folder's __init__ where it crosses folders)."""
    crossing = []
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and _ours(node.module) and node.module != name:
                crossing += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert crossing == []


def test_every_declaration_registers_exactly_one_variant():
    """variants/catalog holds the declarations: each file registers one variant (its `SPEC`) and
    nothing else."""
    import importlib

    import variants
    from variants.rules.registry import VariantSpec

    declared = {}
    for path in sorted((VARIANTS / "catalog").glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"variants.catalog.{path.stem}")
        specs = [v for v in vars(module).values() if isinstance(v, VariantSpec)]
        assert len(specs) == 1 and module.SPEC is specs[0], f"{path.name}: {[s.name for s in specs]}"
        assert variants.get(specs[0].name) is specs[0], f"{path.name}: {specs[0].name} is not registered"
        declared[specs[0].name] = path.name
    assert len(declared) == len(set(declared.values()))  # no two files declare one name


def test_modules_and_functions_are_short():
    long_modules, long_functions = [], []
    for path in list(SUITE.rglob("*.py")) + list(VARIANTS.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert long_modules == [] and long_functions == []


@pytest.mark.slow
def test_a_run_starts_without_the_statistics_libraries():
    """`python -m suite run` parses, plans the full grid and loads its runner without scipy.stats or
    statsmodels (a large share of its start, once loaded by the parser for the gate's defaults); they load
    when a fit or a comparison runs."""
    import sys

    code = (
        "import sys; from suite import cli; from suite.parser import build_parser; from suite.plan import grid; "
        "from suite.run import runner; build_parser(cli.COMMANDS).parse_args(['run', '--grid', 'full']); "
        "grid.resolve('full'); print(sorted(m for m in ('scipy.stats', 'statsmodels') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
