"""A test-only variant that reports the compile-cache variables and the allocator its worker sees (loaded
with `--plugin env_variant`): its `native` path raises with them, so they reach the row's reason."""

from __future__ import annotations

import os

from variants.catalog import full
from variants.impls import dense_impl
from variants.rules import Impl, VariantSpec, register


def _report(q, k, v, *, causal, params):
    seen = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MALLOC_CONF")}
    with open("/proc/self/maps") as maps:
        seen["malloc"] = "jemalloc" if "libjemalloc" in maps.read() else "glibc"
    with open("/proc/self/cmdline", "rb") as cmdline:  # a fork of the server runs the server's command line
        seen["started"] = "forked" if b"multiprocessing.forkserver" in cmdline.read() else "spawned"
    raise RuntimeError(f"worker saw {seen}")


if "env_probe" not in __import__("variants").names():
    register(
        VariantSpec(
            name="env_probe",
            family="test",
            summary="test-only: full attention whose native path reports its environment",
            source="tests",
            params=(),
            theory_fn=full.SPEC.theory_fn,
            impls={"dense": dense_impl(None), "native": Impl("native", _report, cost="reports the environment")},
            mask_fn=full.SPEC.mask_fn,
            row_counts_fn=full.row_counts,
        )
    )
