"""A product with a shared weight, x·wᵀ, through oneDNN on the CPU: a feature map's projection.

On an x86 CPU `x @ w.T` is MKL's sgemm, which on some CPUs runs a code path about half as wide as the
CPU has; oneDNN's matmul on the same dense tensors (`torch.ops.mkldnn._linear_pointwise`, the op
inductor's CPU linear uses) takes the widest, and a feature map's projection and performer's forward
are faster so (docs/performance.md, "(17) The matmul probe measured one library, not the machine").
Elsewhere, and wherever autograd records x, the plain product.
"""

from __future__ import annotations

import torch

_LINEAR = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
_LINEAR_ADD = getattr(_LINEAR, "binary", None)


def onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether x·wᵀ goes through oneDNN: float32 on the CPU, not recorded by autograd, with torch's oneDNN."""
    recorded = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)
    return (
        _LINEAR is not None
        and _LINEAR_ADD is not None
        and torch.backends.mkldnn.is_available()
        and x.device.type == "cpu"
        and x.dtype == w.dtype == torch.float32
        and not recorded
    )


def linear(x: torch.Tensor, w: torch.Tensor, strided: bool = False) -> torch.Tensor:
    """x (…, k) · wᵀ with w (m, k): (…, m). A transposed w (a backward's ω·) is copied contiguous in the call (m·k
    elements, a small copy), so the call reads the one ω its byte count has; with `strided`, oneDNN reads w's
    strides itself (a block's vᵀ, a view of v: as fast as on a copy, without the copy's time: docs/performance.md,
    "Figures behind the code's choices")."""
    if not onednn(x, w):
        return x @ w.T
    flat = x.reshape(-1, x.shape[-1])
    return _LINEAR(flat, w if strided else w.contiguous(), None, "none", [], "").view(*x.shape[:-1], w.shape[0])


def linear_add(x: torch.Tensor, w: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """x (r, k) · wᵀ + other (r, m), w (m, k) read in place whatever its strides (a transposed view): the sum a
    post-op of oneDNN's product, a new (r, m) tensor. Only where `onednn(x, w)`."""
    return _LINEAR_ADD(x, other, w, None, "add")
