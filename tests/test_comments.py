"""Comments and docstrings say what the code does and why: never a measurement, a run, a date or a commit.

The story of a change belongs in commit messages and the changelog; a figure that justifies a design choice
belongs in docs/performance.md (or docs/CLAIMS.md), and the comment links its section. This reads every
comment and docstring (every string statement of a module, class or function body) of the Python sources, and
the `#` comments of the shipped grids, and names each line that quotes a timing, a commit id, a run by its
name or an ISO date. Strings the code uses (a unit in a message, a hash constant) are not comments."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A number (or a range of two) followed by a unit of time, nanoseconds to hours, or of a rate (bytes or FLOPs a
# second); a unit named without a number ("ns a pair", "seconds") says what a value means, and passes.
_TIME_UNIT = r"(?:ns|µs|us|ms|s|sec|secs|min|mins|h|GB/s|GiB/s|MB/s|GFLOP/s|TFLOP/s|GFLOPS|TFLOPS)"
_NUMBER = r"(?<![\w.^·/])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?"
RULES = {
    "timing": re.compile(rf"{_NUMBER}\s?{_TIME_UNIT}(?![\w/])"),
    # 7-40 hex digits with a digit and a letter among them: a commit id (abbreviated or whole)
    "commit": re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"),
    "date": re.compile(r"\b20\d\d-(?:0[1-9]|1[0-2])(?:-\d\d)?\b"),
    "run": re.compile(
        r"\bstored (?:AMD |Intel |GPU )?runs? \d"
        r"|\b(?:in )?run [A-Z]\b(?![\w/])"
        r"|\bruns? \d+ (?:and|to|,) \d+"
        r"|\b(?:full )?run \d+\b(?! (?:of|times|processes|cases|lengths))"
        r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) run of\b"
        r"|\b(?:amd-epyc|intel-xeon|cpu-full|gpu-full|h100|h200)-[\w*-]+"
        r"|benchmarks/runs/|benchmarks/gpu_profile/"
    ),
}
# what a run's own text may hold in a code string, never a comment's: none is exempt by word
TOP = {
    "suite": ("suite", ("suite/history", "suite/run/ab")),
    "suite/history": ("suite/history", ()),
    "suite/run/ab": ("suite/run/ab", ()),
    "variants": ("variants", ()),
    "tests": ("tests", ()),
}
GRIDS = ("suite/plan/grids/*.toml", "benchmarks/*.toml")


def _strings(tree: ast.AST):
    """Every bare string statement: docstrings of modules, classes and functions, and attribute docstrings."""
    for node in ast.walk(tree):
        for stmt in getattr(node, "body", ()) if isinstance(getattr(node, "body", None), list) else ():
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                yield stmt.lineno, stmt.value.value


def python_texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment and each line of each docstring of a Python source."""
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for line, text in _strings(ast.parse(source)):
        out += [(line + i, part) for i, part in enumerate(text.splitlines())]
    return sorted(out)


_TOML_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')


def toml_texts(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each `#` comment of a TOML file (a `#` inside a string is not one)."""
    out = []
    for i, line in enumerate(source.splitlines(), 1):
        bare = _TOML_STRING.sub(lambda m: " " * len(m.group()), line)
        if "#" in bare:
            out.append((i, line[bare.index("#") :]))
    return out


def findings(name: str, source: str) -> list[str]:
    """`name:line: rule: text` for each comment or docstring line of `source` that breaks a rule."""
    texts = python_texts(source) if name.endswith(".py") else toml_texts(source)
    return [
        f"{name}:{line}: {rule}: {text.strip()}"
        for line, text in texts
        for rule, pattern in RULES.items()
        if pattern.search(text)
    ]


def _files(top: str) -> list[Path]:
    if top == "grids":
        return sorted(p for pattern in GRIDS for p in ROOT.glob(pattern))
    folder, skip = TOP[top]
    return sorted(
        p
        for p in (ROOT / folder).rglob("*.py")
        if not any(p.is_relative_to(ROOT / s) for s in skip) and "__pycache__" not in p.parts
    )


@pytest.mark.parametrize("top", [*TOP, "grids"])
def test_comments_quote_no_measurement_run_date_or_commit(top):
    found = [f for path in _files(top) for f in findings(str(path.relative_to(ROOT)), path.read_text())]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "text, rule",
    [
        ("# a worker's start is 2.4 s of CPU here", "timing"),
        ("# 0.43 ns an element", "timing"),
        ("# 17 µs kernel", "timing"),
        ("# 13.0 GB/s copy", "timing"),
        ("# 8-12 s a run", "timing"),
        ("# max 8192 (cb622c8) bought nothing", "commit"),
        ("# measured 2026-11-26", "date"),
        ("# before 2026-11", "date"),
        ("# in stored runs 5 and 6", "run"),
        ("# in stored AMD runs 4 and 7", "run"),
        ("# run L settled", "run"),
        ("# benchmarks/runs/intel-xeon-full-*", "run"),
    ],
)
def test_the_rules_catch(text, rule):
    assert [f.split(": ")[1] for f in findings("x.py", text + "\n")] == [rule]


@pytest.mark.parametrize(
    "text",
    [
        "# seconds a call at most (max_call_s)",
        "# ns a gathered pair at a head's K",
        "# the fastest of 5 runs of the probe",
        "# fp16 and bf16, sm_86 and H100",
        "# a sha256 of the canonical JSON",
        "# n = 4096 rows, 16 heads, 2 slices",
        "# run them as embedding bags",
        "# 0 / 1 / 2 and why, for two stored runs",
        "# scores a run of blocks",
        "# 2·B·n·d bytes; O(n^1.5) in 4 slices",
        "# Vaswani et al. 2017",
    ],
)
def test_the_rules_pass(text):
    assert findings("x.py", text + "\n") == []


def test_units_in_code_strings_are_not_comments():
    source = 'def f():\n    """Seconds a call."""\n    return "took 2.4 s", "cb622c8d"  # the message\n'
    assert findings("x.py", source) == []
    assert findings("x.toml", 'note = "2.4 s # not a comment"\nmax = 8  # 8 s a call\n') == [
        "x.toml:2: timing: # 8 s a call"
    ]
