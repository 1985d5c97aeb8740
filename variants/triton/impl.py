"""The `triton` implementation kind: a variant's plan (its parts, built in setup) run by our kernels.
Runnable on CUDA, and on the CPU under Triton's interpreter; elsewhere its reasons say why
(variants.triton.capability)."""

from __future__ import annotations

import time
from typing import Callable

from variants.rules import FLOAT_DTYPES, Impl, Prepared, Problem
from variants.triton.capability import reasons

INT32 = 2**31  # the kernels' offsets are 32-bit integers


def kernel_reasons(problem: Problem) -> list[str]:
    why = reasons(problem.device, problem.dtype)
    size = problem.batch * problem.num_heads * max(problem.seq_len, problem.key_len) * problem.head_dim
    if size >= INT32:
        why.append(f"B·H·n·d = {size} >= 2^31: the triton kernels' offsets are 32-bit")
    return why


def triton_impl(
    plan: Callable,
    run: Callable | None = None,
    *,
    cost: str,
    extra_reasons: Callable[[Problem], list[str]] | None = None,
) -> Impl:
    """`plan(n, causal, params, like=q)` is setup (index lists, parts); `run(q, k, v, plan, causal)`
    the timed call (default: the softmax parts' union, variants.triton.union.attend). On CUDA one
    call is made in setup, so Triton's compile is a setup cost, not the first timed call's."""

    def prepare(q, k, v, *, causal, params):
        from variants.triton import union  # NB: imports triton; the registry never does

        call = run or union.attend
        start = time.perf_counter()
        layout = plan(q.shape[-2], causal, params, q)
        setup = {"plan_s": time.perf_counter() - start}
        fn = lambda: call(q, k, v, layout, causal)  # noqa: E731
        notes = {"kernels": "triton, interpreted on the CPU" if q.device.type == "cpu" else "triton"}
        if q.device.type == "cuda":
            import torch

            start = time.perf_counter()
            with torch.no_grad():
                fn()
            torch.cuda.synchronize()
            setup["first_call_s"] = time.perf_counter() - start
        return Prepared(fn, setup, notes)

    def why(problem: Problem) -> list[str]:
        return kernel_reasons(problem) or (extra_reasons(problem) if extra_reasons else [])

    return Impl(
        "triton",
        prepare,
        cost=cost,
        devices=("cuda", "cpu"),
        dtypes=FLOAT_DTYPES,
        extra_reasons=why,
        countable=False,  # NB: a Triton kernel does not run on meta tensors
        decode=False,
    )  # a step of one query against a cache is not built as a kernel here
