"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): φ(x) = elu(x) + 1.

out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z, S = Σ_j φ(k_j) v_jᵀ, z = Σ_j φ(k_j). Claim: ≈ 4·B·H·n·d² FLOPs,
exponent 1 in n and 2 in d.
"""

from __future__ import annotations

import torch.nn.functional as F

from variants.linearized import FeatureMap, linear_theory, linearized_variant


class Elu(FeatureMap):
    """φ(x) = elu(x) + 1, positive and row-local: no scale needed."""

    def query(self, x):
        return F.elu(x).add_(1)

    def key(self, x):
        return F.elu(x).add_(1), x.new_zeros(x.shape[0], x.shape[1], 1, 1)


def elu_features(params: dict, q) -> FeatureMap:
    return Elu()


SPEC = linearized_variant(
    name="linear",
    summary="Linear attention with φ(x) = elu(x) + 1: Q′(K′ᵀV) in O(n·d²).",
    source="Katharopoulos et al. 2020, Transformers are RNNs",
    params=(),
    features=elu_features,
    theory_fn=linear_theory,
)
