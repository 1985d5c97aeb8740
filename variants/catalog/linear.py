"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): φ(x) = elu(x) + 1.

out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z, S = Σ_j φ(k_j) v_jᵀ, z = Σ_j φ(k_j). Claim: ≈ 4·B·H·n·d² FLOPs,
exponent 1 in n and 2 in d.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from variants.impls import Fused, linear_theory, linearized_variant
from variants.native.core import exp_
from variants.native.linearized import FeatureMap
from variants.rules import MemoryClaim


def elu_plus_one(x):
    """elu(x) + 1. Where autograd does not record, one compiled pass where it warmed (ELU_PLUS_ONE), else as e^min(x, 0)
    + max(x, 0) with the exponential of variants.native.core.expo: faster than F.elu(x) + 1, and closer to float64
    below -8, where e^x − 1 + 1 cancels. Where it records, F.elu: one op with its own backward, where the chain's
    autograd is slower (docs/performance.md, "Changes read off the profiler, (1) to (5)")."""
    if x.requires_grad and torch.is_grad_enabled():
        return F.elu(x).add_(1)
    return ELU_PLUS_ONE(x)


def _elu_eager(x):
    return exp_(x.clamp_max(0)).add_(F.relu(x))


def _elu_traced(x):
    """The same, written for the compiler: one pass, e^x below 0 (exact there), x + 1 above."""
    return torch.where(x > 0, x + 1, torch.exp(x))


ELU_PLUS_ONE = Fused(_elu_eager, _elu_traced, min_elements=1 << 17, name="elu+1")  # variants.impls.compiled


class Elu(FeatureMap):
    """φ(x) = elu(x) + 1, positive and row-local: no scale needed."""

    scaled = False

    def query(self, x):
        return elu_plus_one(x)

    def key(self, x):
        return elu_plus_one(x), x.new_zeros(x.shape[0], x.shape[1], 1, 1)

    def warm(self, like, rows) -> dict[str, str]:
        """Compile φ for chunks of q's rows, 1 row and more: views of q (its strides), and whole (a
        call in one chunk)."""
        examples = [(x,) for n in (1, 2) for x in (like[:, :, :n], like[:, :, :n].contiguous())]
        b, h, _, d = like.shape
        return {"feature_map": f"elu+1 {ELU_PLUS_ONE.warm(*examples, most=b * h * rows * d)}"}

    def vjp(self, x, f, df):
        """φ'(x) = e^x = φ(x) for x <= 0 and 1 above, so φ' = min(φ, 1): one pass over f, where
        autograd recorded F.elu and ran its backward (the key's log-scale is 0: f is φ(x))."""
        return df.mul_(f.clamp_max(1))


def elu_features(params: dict, q) -> FeatureMap:
    return Elu()


SPEC = linearized_variant(
    name="linear",
    summary="Linear attention with φ(x) = elu(x) + 1: Q′(K′ᵀV) in O(n·d²).",
    source="Katharopoulos et al. 2020, Transformers are RNNs",
    memory=MemoryClaim(
        "Katharopoulos et al. 2020, Transformers are RNNs: linear memory in n; causal training with constant memory "
        "a step",
        forward=1.0,
        training=1.0,
    ),
    params=(),
    features=elu_features,
    theory_fn=linear_theory,
)
