"""FLOPs counted by FlopCounterMode on meta tensors, a cross-check of the declared theory (patched for the
in-place GEMMs it would count as zero)."""

from __future__ import annotations

import torch

import variants
from suite.plan.case import Case
from suite.run.measurement.inputs import inputs
from variants.rules import padding


def in_place_gemms() -> dict:
    """FlopCounterMode's own formulas for the in-place forms of its GEMMs: it registers baddbmm and
    addmm, and counted 0 for baddbmm_ and addmm_ (linearized attention accumulates K′ᵀV by baddbmm_:
    its counted work read half its FLOPs, a work ratio of 0.51). `__wrapped__`: the formula on shapes,
    which the mode wraps again."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    return {aten.baddbmm_: flop_registry[aten.baddbmm].__wrapped__, aten.addmm_: flop_registry[aten.addmm].__wrapped__}


def count_flops(case: Case) -> tuple[int | None, str]:
    """FlopCounterMode on meta tensors: the implementation's matmul work in the call that is timed (its setup,
    untimed, is not counted), where it can be counted.

    NB: FlopCounterMode counts 0 for CPU SDPA and raises under flex_attention; on meta tensors
    SDPA is counted. Sparse (CSR) ops cannot run on meta: those are reported as not countable.
    """
    from torch.utils.flop_counter import FlopCounterMode

    spec = variants.get(case.variant)
    if not spec.impls[case.impl].countable:
        return None, f"not countable: FlopCounterMode cannot trace {case.impl}"
    try:
        q, k, v = inputs(case, device="meta", requires_grad=case.mode == "fwd_bwd")
        impl = spec.impls[case.impl]
        params = spec.resolve(case.seq_len, dict(case.params))
        # NB: setup outside the counter, as it is outside the timing: a decode step's state of the cached keys
        # (the prefill) is built there, and counted with the step it read as work growing in n
        timed = padding.prepare(impl, q, k, v, causal=case.causal, params=params, lengths=case.lengths)
        with FlopCounterMode(display=False, custom_mapping=in_place_gemms()) as counter:
            out = timed()
            if case.mode == "fwd_bwd":
                torch.autograd.grad(out, (q, k, v), torch.ones_like(out), allow_unused=True)
        return int(counter.get_total_flops()), "counted on meta tensors"
    except Exception as err:  # noqa: BLE001 - any failure only means "not countable"
        return None, f"not countable on meta: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
