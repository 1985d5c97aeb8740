"""Where inductor and Triton keep what they compile: a folder named once (`--compile-cache DIR`), so that
a fresh worker, a run resumed on the next GPU lease, or the next CI job loads kernels an earlier process
compiled instead of compiling them again (FlexAttention's first compile in a cold process is most of a
short lease: docs/gpu.md).

Both libraries read their variable when they compile, not when imported: set in this process before its
workers start, it reaches them (local workers, a local Ray cluster, `ab`'s servers inherit it). A
compiled kernel is code that runs: the folder may not lie inside the results folder, whose files are
data that travel between machines and are never executed.
"""

from __future__ import annotations

import os
from pathlib import Path

from suite.errors import UsageError

OPTION = "--compile-cache"
# the variable each library reads, and the subfolder of DIR it names (benchmarks/gpu_session.sh: the same)
VARIABLES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def environment(folder: Path) -> dict[str, str]:
    """The variables that put both caches under `folder`."""
    return {name: str(Path(folder) / sub) for name, sub in VARIABLES.items()}


def check(value: str, results_dir: Path) -> Path:
    """The cache's folder, absolute; UsageError naming the option for an empty value, a file, a folder
    that cannot be made, or one inside the results folder."""
    if not value or not value.strip():
        raise UsageError(f"{OPTION} {value!r} (allowed: a folder's path)")
    folder, results = Path(value).expanduser().resolve(), Path(results_dir).expanduser().resolve()
    if folder == results or results in folder.parents:
        raise UsageError(
            f"{OPTION} {value} (allowed: a folder outside --results-dir {results_dir}: what is "
            "compiled runs, and nothing from a results folder is ever executed)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{OPTION} {value} (allowed: a folder that can be made: {err.strerror or err})") from None
    return folder


def use(value: str | None, results_dir: Path) -> Path | None:
    """Check the option's value and set the variables in this process, for the workers it starts."""
    if value is None:
        return None
    folder = check(value, results_dir)
    os.environ.update(environment(folder))
    return folder


def named(argv: list[str]) -> bool:
    """Whether a command line names the option (argparse's abbreviations too): `python -m suite run` then
    starts its workers' fork server after parsing, so that the server inherits the variables."""
    return any(len(arg.split("=")[0]) > 2 and OPTION.startswith(arg.split("=")[0]) for arg in argv)
