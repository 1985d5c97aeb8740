"""Performer FAVOR+ (Choromanski et al. 2021): positive orthogonal random features.

φ(x) = exp(ωᵀx − ‖x‖²/2)/√m on x = q·d^(−1/4) (same for k), then as `linear`. Approximates
softmax attention with error about 1/√m. Claim: ≈ 4·B·H·n·m·d FLOPs, exponent 1 in n and in d.
"""

from __future__ import annotations

import functools

import torch

from variants.linearized import linear_theory, linearized_variant
from variants.registry import Param

FEATURES = Param("features", 256, "random features m", minimum=1)
SEED = Param("seed", 0, "seed of the projection", minimum=0)


@functools.lru_cache(maxsize=32)
def projection(head_dim: int, features: int, seed: int) -> torch.Tensor:
    """ω: (m, d) in float64 on the CPU. Orthogonal blocks of d rows (QR of Gaussians), each row
    rescaled to the norm of a Gaussian vector, so rows keep the marginal law of N(0, I)."""
    gen = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(-(-features // head_dim)):
        gaussian = torch.randn(head_dim, head_dim, generator=gen, dtype=torch.float64)
        q, _ = torch.linalg.qr(gaussian)
        blocks.append(q.T)
    omega = torch.cat(blocks)[:features]
    norms = torch.randn(features, head_dim, generator=gen, dtype=torch.float64).norm(dim=1)
    return omega * norms[:, None]


def favor_features(params: dict, q: torch.Tensor):
    d = q.shape[-1]
    omega = projection(d, params["features"], params["seed"]).to(q.device, q.dtype)  # (m, d)
    m = omega.shape[0]

    def phi(x: torch.Tensor, per_row: bool) -> torch.Tensor:
        x = x * d**-0.25
        logits = x @ omega.T - (x * x).sum(dim=-1, keepdim=True) / 2  # (B, H, n, m)
        # Stabilizer, as the reference implementation does: subtracting a per-row maximum (for
        # queries) or one maximum per head (for keys) scales numerator and normalizer alike.
        top = logits.amax(dim=-1, keepdim=True) if per_row else logits.amax(dim=(-1, -2), keepdim=True)
        return torch.exp(logits - top) * m**-0.5

    return lambda q, k: (phi(q, per_row=True), phi(k, per_row=False))


def performer_theory(**kw):
    return linear_theory(**kw, features=kw["params"]["features"])


SPEC = linearized_variant(
    name="performer",
    summary="Performer FAVOR+: positive orthogonal random features approximating softmax, O(n·m·d).",
    source="Choromanski et al. 2021, Rethinking Attention with Performers",
    params=(FEATURES, SEED),
    features=favor_features,
    theory_fn=performer_theory,
)
