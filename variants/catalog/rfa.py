"""Random Feature Attention (Peng et al. 2021): random Fourier features in place of exp(q·k).

Queries and keys are scaled to unit norm, then φ(x) = √(1/m)·[sin(ωx), cos(ωx)] with ω (m × d)
seeded N(0, 1/σ²), so φ(x)·φ(y) ≈ exp(−‖x − y‖²/2σ²) = exp((x·y − 1)/σ²): softmax attention at
temperature σ² over unit vectors. Then as `linear`: φ(q)ᵀS / φ(q)ᵀz. Claim: ≈ 4·B·H·n·2m·d FLOPs,
exponent 1 in n and in d. The normalizer is not bounded away from zero (the paper's known caveat).

`gate` = 1 is the paper's gated causal form: S_t = g_t·S_{t−1} + (1 − g_t)·φ(k_t)v_tᵀ (z likewise)
with a forget gate g_t = σ(w·k_t + b); w and b are learned in the paper, seeded here (w ~ N(0, 1/d),
b = 1). It is a recurrence, so causal only.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from variants.impls.compiled import Fused
from variants.impls.linearized import linear_theory, linearized_variant
from variants.native.core.onednn import linear
from variants.native.linearized import FeatureMap, gated_linear_time, gated_quadratic
from variants.rules import MemoryClaim
from variants.rules.registry import Param

FEATURES = Param("features", 128, "random frequencies m (2m features)", minimum=1)
SIGMA = Param("sigma", 1.0, "kernel width σ (a temperature σ² over unit vectors)", minimum=1e-3, kind=float)
GATE = Param("gate", 0, "1: the gated recurrence (causal only)", minimum=0, maximum=lambda n: 1)
SEED = Param("seed", 0, "seed of the frequencies and the gate", minimum=0)
GATE_BIAS = 1.0


@functools.lru_cache(maxsize=32)
def frequencies(head_dim: int, features: int, sigma: float, seed: int) -> torch.Tensor:
    """ω: (m, d) float64 on the CPU, N(0, 1/σ²)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(features, head_dim, generator=gen, dtype=torch.float64) / sigma


@functools.lru_cache(maxsize=32)
def gate_weights(head_dim: int, seed: int) -> torch.Tensor:
    """w: (d,) float64 on the CPU, N(0, 1/d), drawn apart from ω."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(head_dim, generator=gen, dtype=torch.float64) / head_dim**0.5


def _sincos(angles, scale):
    """scale·[sin A, cos A] along the last dim: the readable form, and what the compiler fuses into one pass."""
    return torch.cat([angles.sin(), angles.cos()], dim=-1) * scale


def _sincos_eager(angles, scale):
    """The same into one buffer: no sin, cos and concatenated copies (eager, where nothing compiles)."""
    half = angles.shape[-1]
    out = angles.new_empty(*angles.shape[:-1], 2 * half)
    torch.sin(angles, out=out[..., :half])
    torch.cos(angles, out=out[..., half:])
    return out.mul_(scale)


# variants.impls.compiled: one pass, several times eager's (docs/performance.md, "Figures behind the code's choices")
SINCOS = Fused(_sincos_eager, _sincos, min_elements=1 << 13, name="sin and cos")


class Fourier(FeatureMap):
    """φ(x) = √(1/m)[sin(ωx̂), cos(ωx̂)] on x̂ = x/‖x‖: bounded, so no scale is needed. `gate`: w (d,)."""

    held = 2  # the angles (half width) and the features, written in place where autograd does not record

    def __init__(self, omega: torch.Tensor, gate: torch.Tensor | None = None):
        self.omega, self.features, self.gate = omega, 2 * omega.shape[0], gate

    def query(self, x):
        angles = linear(F.normalize(x, dim=-1), self.omega)  # (B, H, n, m/2)
        scale = (2 / self.features) ** 0.5
        if torch.is_grad_enabled() and angles.requires_grad:  # the readable form, recorded by autograd
            return _sincos(angles, scale)
        return SINCOS(angles, scale)

    def warm(self, like, rows) -> dict[str, str]:
        """Compile the features' sin and cos (SINCOS) for q's dtype and device, chunks of 1 row and more."""
        b, h, _, _ = like.shape
        half, scale = self.features // 2, (2 / self.features) ** 0.5
        examples = [(like.new_zeros(b, h, n, half), scale) for n in (1, 2)]
        return {"feature_map": f"sin and cos {SINCOS.warm(*examples, most=b * h * rows * half)}"}

    def key(self, x):
        return self.query(x), x.new_zeros(x.shape[0], x.shape[1], 1, 1)

    def vjp(self, x, f, df):
        """f = √(2/m)[sin A, cos A] with A = x̂·ωᵀ, so dA = df_sin ∘ f_cos − df_cos ∘ f_sin (no sin or
        cos again), dx̂ = dA·ω, and through x̂ = x/‖x‖: dx = (dx̂ − (dx̂·x̂)·x̂)/‖x‖."""
        half = f.shape[-1] // 2
        da = df[..., :half].mul_(f[..., half:]).sub_(df[..., half:].mul_(f[..., :half]))  # (…, C, m/2)
        norm = x.norm(dim=-1, keepdim=True).clamp_min_(1e-12)  # F.normalize's eps
        unit = x / norm
        dunit = linear(da, self.omega.T)  # (…, C, d)
        return dunit.sub_(unit.mul_((dunit * unit).sum(-1, keepdim=True))).div_(norm)

    def log_gates(self, k):
        """log g and log(1 − g) per position: (B, H, n) each."""
        return self.log_gates_of(self.gate_logits(k))

    def gate_logits(self, k):
        """w·k + b per position: (B, H, n)."""
        return k @ self.gate + GATE_BIAS

    @staticmethod
    def log_gates_of(logits):
        return F.logsigmoid(logits), F.logsigmoid(-logits)


def fourier_features(params: dict, q: torch.Tensor) -> FeatureMap:
    omega = frequencies(q.shape[-1], params["features"], params["sigma"], params["seed"])
    gate = gate_weights(q.shape[-1], params["seed"]).to(q.device, q.dtype) if params["gate"] else None
    return Fourier(omega.to(q.device, q.dtype), gate)


def gate_reasons(problem) -> list[str]:
    if dict(problem.params).get("gate") and not problem.causal:
        return ["gate=1 with causal=False (the gated form is a recurrence: causal only)"]
    return []


def rfa_theory(**kw):
    m = kw["params"]["features"]
    theory = linear_theory(
        **kw,
        features=2 * m,  # ω (m, d), and the gate's w (d)
        parameters=(m + kw["params"]["gate"]) * kw["head_dim"],
    )
    bh = kw["batch"] * kw["num_heads"]
    rows = bh * (kw["seq_len"] + (kw.get("kv_len") or kw["seq_len"]))  # query rows and key rows
    theory.extra_flops["feature_map"] = 2 * rows * kw["head_dim"] * m  # ωx̂ for q and k (m frequencies)
    if kw["params"]["gate"]:
        theory.extra_flops["gate"] = 2 * bh * kw["seq_len"] * kw["head_dim"]
    return theory


SPEC = linearized_variant(
    name="rfa",
    summary="Random Feature Attention: sin/cos random Fourier features of unit-norm q and k, O(n·m·d).",
    source="Peng et al. 2021, Random Feature Attention",
    memory=MemoryClaim(
        "Peng et al. 2021, Random Feature Attention: linear time and space in n, in training too",
        forward=1.0,
        training=1.0,
    ),
    params=(FEATURES, SIGMA, GATE, SEED),
    features=fourier_features,
    theory_fn=rfa_theory,
    cores=(gated_quadratic, gated_linear_time),
    reasons=gate_reasons,
)
