"""The code passes ruff's lint and is formatted as ruff formats it (pyproject.toml's [tool.ruff]), as CI and the
pre-commit hooks check."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert exe is not None, 'ruff is not installed: pip install -c constraints.txt -e ".[test]"'
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint_is_clean():
    res = _ruff("check", "--no-cache", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format_leaves_every_file_as_it_is():
    res = _ruff("format", "--no-cache", "--check", ".")
    assert res.returncode == 0, res.stdout + res.stderr
