"""Implementations people already run: community packages, behind the `peers` extra.

Each is an `Impl` named after its package. Where the package is not installed it is reported
unavailable with the reason (the registry never imports it at load), and where the package's
definition differs from the variant's, `Differs` says how, and where the two coincide for the check.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import time
from typing import Callable

from variants.rules import FLOAT_DTYPES, Differs, Impl, Prepared, Problem

EXTRA = 'pip install -e ".[peers]"'


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def missing(package: str, module: str, install: str = EXTRA) -> list[str]:
    """Why `package` cannot be used here: not installed ([] when it is)."""
    if importlib.util.find_spec(module) is None:
        return [f"package {package} is not installed ({install})"]
    return []


def peer(
    package: str,
    module: str,
    build: Callable,
    *,
    cost: str,
    differs: Differs,
    reasons: Callable[[Problem], list[str]] | None = None,
    devices: tuple[str, ...] | None = None,
    supports_causal: bool = True,
    dtypes: tuple = FLOAT_DTYPES,
    install: str = EXTRA,
) -> Impl:
    """An Impl named after `package`. `build(q, k, v, causal, params)` imports the package, sets it
    up (weights, projections) and returns the zero-argument call that is timed."""

    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        call = build(q, k, v, causal, params)
        return Prepared(
            call, {"library_setup_s": time.perf_counter() - start}, notes={"library": f"{package} {version(package)}"}
        )

    def extra(problem: Problem) -> list[str]:
        return missing(package, module, install) or (reasons(problem) if reasons else [])

    return Impl(
        package,
        prepare,
        cost=cost,
        devices=devices,
        supports_causal=supports_causal,
        dtypes=dtypes,
        extra_reasons=extra,
        countable=False,
        library=package,
        differs=differs,
        decode=False,
    )  # NB: a library layer takes a sequence, not one query against a cache
