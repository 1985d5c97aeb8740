"""Performer FAVOR+ (Choromanski et al. 2021): positive orthogonal random features.

φ(x) = exp(ωᵀx − ‖x‖²/2)/√m on x = q·d^(−1/4) (same for k), then as `linear`. Approximates
softmax attention with error about 1/√m. Claim: ≈ 4·B·H·n·m·d FLOPs, exponent 1 in n and in d.
"""

from __future__ import annotations

import functools
import math

import torch

from variants.impls import linear_theory, linearized_variant, peer
from variants.native.core import exp_
from variants.native.core.onednn import linear
from variants.native.linearized import FeatureMap
from variants.rules import Differs, MemoryClaim, Param

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


class Favor(FeatureMap):
    """φ(x) = exp(ωᵀx − ‖x‖²/2)/√m on x·d^(−1/4), computed with a stabilizer as the reference
    implementation does: a per-row maximum for queries (it cancels in each row), and for keys one
    maximum per head, returned as the log-scale so chunks can be brought to a common scale."""

    held = 2  # NB: with 1, a short causal call held more outputs than it counts beside its state

    def __init__(self, omega: torch.Tensor, head_dim: int):
        self.omega, self.d, self.features = omega, head_dim, omega.shape[0]

    def _logits(self, x):
        x = x * self.d**-0.25
        return linear(x, self.omega).sub_((x * x).sum(dim=-1, keepdim=True) / 2)  # (B, H, n, m)

    def _features(self, x, over):
        """exp(logits − top)/√m with one (·, m) buffer: in place after the product (mm keeps its
        inputs, not its output, for backward). The stabilizer is detached: it cancels exactly."""
        logits = self._logits(x)
        top = logits.detach().amax(dim=over, keepdim=True)
        return exp_(logits.sub_(top + 0.5 * math.log(self.features))), top

    def query(self, x):
        return self._features(x, -1)[0]  # per row: cancels in each row

    def key(self, x):
        return self._features(x, (-1, -2))  # (B, H, 1, 1): one per head, the chunk's log-scale

    def vjp(self, x, f, df):
        """f = c·exp(ωᵀy − ‖y‖²/2) on y = x·d^(−1/4) (c: the stabilizer and any fixed scale), so with
        g = df ∘ f: dy = g·ω − rowsum(g)·y, and dx = d^(−1/4)·dy. Two GEMM-shaped products and
        two passes, where autograd replayed the map's chain of ops."""
        c = self.d**-0.25
        g = df.mul_(f)  # (…, C, m)
        return linear(g, self.omega.T).mul_(c).sub_(x * g.sum(-1, keepdim=True).mul_(c * c))  # (…, C, d)


def favor_features(params: dict, q: torch.Tensor) -> FeatureMap:
    omega = projection(q.shape[-1], params["features"], params["seed"]).to(q.device, q.dtype)  # (m, d)
    return Favor(omega, q.shape[-1])


def performer_theory(**kw):
    m = kw["params"]["features"]
    return linear_theory(**kw, features=m, parameters=m * kw["head_dim"])  # ω: (m, d)


def library_call(q, k, v, causal, params):
    """`performer-pytorch`'s FastAttention with our ω in its projection buffer."""
    import contextlib
    import io

    from performer_pytorch import FastAttention

    with contextlib.redirect_stdout(io.StringIO()):  # its causal form prints that a CUDA kernel is missing
        layer = FastAttention(dim_heads=q.shape[-1], nb_features=params["features"], causal=causal)
    layer = layer.to(q.device, q.dtype).eval()
    with torch.no_grad():
        layer.projection_matrix.copy_(projection(q.shape[-1], params["features"], params["seed"]))
    return lambda: layer(q, k, v)


PERFORMER_PYTORCH = peer(
    "performer-pytorch",
    "performer_pytorch",
    library_call,
    cost="O(n·m·d): einsum form; causal by a cumulative sum over chunks of 128 rows (O(n·m·d) memory)",
    differs=Differs(
        "adds 1e-4 to every feature, relative to the query row's or the key head's largest: on "
        "unit-variance inputs at d = 64 most key features are below that, and its output is far "
        "from FAVOR+'s; checked on q, k scaled by 0.1, where they coincide (our ω in its "
        "projection buffer)",
        input_scale=0.1,
        tol=1e-3,
    ),
)


SPEC = linearized_variant(
    name="performer",
    summary="Performer FAVOR+: positive orthogonal random features approximating softmax, O(n·m·d).",
    source="Choromanski et al. 2021, Rethinking Attention with Performers",
    memory=MemoryClaim(
        "Choromanski et al. 2021, Performers: O(n·m + n·d + m·d) space, linear in n, in training too",
        forward=1.0,
        training=1.0,
    ),
    params=(FEATURES, SEED),
    features=favor_features,
    theory_fn=performer_theory,
    peers=(PERFORMER_PYTORCH,),
    approximates="full",  # docs/CLAIMS.md: its error against softmax attention shrinks about as 1/√m
)
