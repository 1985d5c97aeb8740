"""e^x in place, as fast as the device allows: the exponential of every softmax and feature map.

torch's CPU `exp_` is several times slower than its `exp2_` (docs/performance.md, "Changes read off the profiler, (1)
to (5)"): float32 on the CPU goes as 2^(x·log2 e), a multiply and exp2_. Its relative error is about 1e-6 at |x| ≤ 15
(exp_'s 6e-8), from rounding x·log2 e, and smaller nearer 0, where a softmax's largest terms are. Other dtypes and
devices keep exp_: bfloat16 rounds the product to 8 bits (0.07 off at |x| ≤ 3), and on a GPU the multiply would be a
second pass over memory for an exp that costs no more than exp2.
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.0 / math.log(2.0)


def exp_(x: torch.Tensor) -> torch.Tensor:
    """x ← e^x, in place; returns x."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        return x.mul_(LOG2E).exp2_()
    return x.exp_()
