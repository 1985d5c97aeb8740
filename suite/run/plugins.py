"""Plugins: modules that register extra variants, loaded only when named on the command line.

A results folder is data, never code: plan.json records the plugins a run was made with, and a
resumed or confirmed run asks for them again on its command line instead of importing what the
file names. A module found under the results folder is refused (the working directory is on
`sys.path`, so `results.x.payload` would otherwise import a file planted in a run folder).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from suite.errors import UsageError

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def load(modules: list[str], results_dir: Path) -> None:
    """Import each module, after checking that it is a module name found outside `results_dir`.

    Each package on the way is checked before it is imported (finding `a.b` imports `a`)."""
    results = Path(results_dir).resolve()
    for module in modules:
        if not isinstance(module, str) or not MODULE.fullmatch(module):
            raise UsageError(f"--plugin {module!r} (allowed: a dotted module name)")
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            where = origin(".".join(parts[:i]))
            if results == where or results in where.parents:
                raise UsageError(
                    f"--plugin {module!r}: it is under the results folder {results_dir} ({where}); "
                    "plugins are code and results are data: move it elsewhere"
                )
        importlib.import_module(module)


def origin(module: str) -> Path:
    """The file (or folder) the module would be imported from; UsageError where there is none."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        raise UsageError(f"--plugin {module!r}: {err}") from None
    if spec is None:
        raise UsageError(f"--plugin {module!r}: no such module on the Python path")
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin).resolve()
    locations = list(spec.submodule_search_locations or [])  # a namespace package: its folder
    return Path(locations[0]).resolve() if locations else Path("/")


def require(recorded: list[str], given: list[str], run_name: str) -> None:
    """A resumed or re-run run needs the plugins it was made with, named on the command line again."""
    missing = [module for module in recorded if module not in given]
    if missing:
        flags = " ".join(f"--plugin {module}" for module in missing)
        raise UsageError(
            f"run {run_name} was made with plugin(s) {', '.join(missing)}: name them again "
            f"({flags}); a run's files never choose code to import"
        )
