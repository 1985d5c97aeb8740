"""Test-only variants that fail on purpose (loaded with `--plugin fault_variants`).

Each is `full` attention with a `native` implementation that misbehaves in one way, so the
runner's isolation can be tested as asv tests its own: raise, exit, hang, exhaust memory, lie.
"""

from __future__ import annotations

import os
import signal
import time

import torch

from variants.catalog import full
from variants.impls import dense_impl
from variants.rules import Impl, Prepared, VariantSpec, paths, register


def _raise():
    raise RuntimeError("injected failure")


def _exit():
    os._exit(3)


def _hang():
    time.sleep(3600)


def _exhaust_memory():
    hoard = []
    while True:  # grows step by step, as a leak would, until the allocator refuses
        hoard.append(torch.ones(256 * 2**20, dtype=torch.uint8))


def _killed():
    os.kill(os.getpid(), signal.SIGKILL)  # as `kill -9` from outside would: no OOM kill is counted


FAULTS = {"raise": _raise, "exit": _exit, "hang": _hang, "oom": _exhaust_memory, "killed": _killed}


def _faulty(action) -> Impl:
    def prepare(q, k, v, *, causal, params):
        return Prepared(lambda: action())

    return Impl("native", prepare, cost="a fault injected for tests")


def _wrong() -> Impl:
    def prepare(q, k, v, *, causal, params):
        return Prepared(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v) + 1.0)

    return Impl("native", prepare, cost="a wrong answer injected for tests")


def _register(name: str, native: Impl) -> None:
    if name in __import__("variants").names():
        return
    register(
        VariantSpec(
            name=name,
            family="test",
            summary=f"test-only: full attention whose native path does '{name}'",
            source="tests",
            params=(),
            theory_fn=full.SPEC.theory_fn,
            impls={"dense": dense_impl(None), "native": native},
            mask_fn=full.SPEC.mask_fn,
            row_counts_fn=full.row_counts,
        )
    )


for fault, action in FAULTS.items():
    _register(f"fault_{fault}", _faulty(action))
_register("fault_wrong", _wrong())


# ------------------------------------------------------------------ a slowdown injected on demand
PACE_S = 0.002  # each call waits this long ($SUITE_TEST_PACE_S if set; times pace_factor for `paced/native`)


def wait(seconds: float) -> None:
    """Spin on the clock until `seconds` have passed. A sleep ends when the scheduler wakes the
    process, late by amounts that differ between processes and runs on a shared machine (docs/performance.md,
    "Noise"); a spin ends on time unless the core is taken away at that very moment."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def pace_factor(n: int) -> float:
    """How much `paced/native` is slowed at length n: $SUITE_TEST_SLOWDOWN, only at the lengths in
    $SUITE_TEST_SLOW_N (comma-separated) when that is set; and times a module `pace_factor` (FACTOR
    at its SLOW_N) where the process finds one: how `suite ab`'s tests make side B's code slower."""
    factor = float(os.environ.get("SUITE_TEST_SLOWDOWN", "1"))
    only = os.environ.get("SUITE_TEST_SLOW_N")
    if only and str(n) not in only.split(","):
        factor = 1.0
    try:
        import pace_factor as side
    except ImportError:
        return factor
    return factor * (side.FACTOR if n in side.SLOW_N else 1.0)


def _paced(slowed: bool) -> Impl:
    def prepare(q, k, v, *, causal, params):
        pace = float(os.environ.get("SUITE_TEST_PACE_S", PACE_S))
        pause = pace * (pace_factor(q.shape[-2]) if slowed else 1.0)

        def call():
            wait(pause)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return Prepared(call)

    return Impl(
        "native" if slowed else "sdpa",
        prepare,
        cost="SDPA plus a timed wait" + (" stretched by pace_factor(n)" if slowed else ""),
    )


if "paced" not in __import__("variants").names():
    register(
        VariantSpec(
            name="paced",
            family="test",
            summary="test-only: full attention plus a timed wait; native's wait "
            "is multiplied by $SUITE_TEST_SLOWDOWN (an injected regression), sdpa's is not",
            source="tests",
            params=(),
            theory_fn=full.SPEC.theory_fn,
            impls={"dense": dense_impl(None), "native": _paced(True), "sdpa": _paced(False)},
            mask_fn=full.SPEC.mask_fn,
            row_counts_fn=full.row_counts,
        )
    )


# ------------------------------------------------------------------ the worker as a case sees it
def _inside() -> Impl:
    def prepare(q, k, v, *, causal, params):
        import torch._inductor.config as inductor

        notes = {"compile_threads": str(inductor.compile_threads), "threads": str(torch.get_num_threads())}

        def call():
            paths.took("sdpa")  # the path a timed call takes, recorded in the row's notes
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        return Prepared(call, notes=notes)

    return Impl("native", prepare, cost="SDPA; its notes say how the worker was set up, and the path its calls took")


_register("inside", _inside())
