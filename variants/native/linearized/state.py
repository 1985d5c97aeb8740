"""What the linearized kernels share: the feature map φ, the running state (S, z) at a common log-scale,
and the size of a chunk of rows."""

from __future__ import annotations

import torch

from variants.native.core import step_elements


class FeatureMap:
    """φ for queries and keys. A key map may return its features divided by exp(s), with a log-scale
    s per head (B, H, 1, 1) of its choosing: a common scale cancels between numerator and normalizer,
    and lets exp-based maps (FAVOR+) stay finite. elu+1 needs none (s = 0). `held`: the (rows × m)
    tensors a call of the map holds at its peak, which sizes the chunks (`rows_per_step`)."""

    held = 1
    scaled = True  # False: the key map's log-scale is always 0, and chunks need no common scale

    def query(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def key(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def warm(self, like: torch.Tensor, rows: int) -> dict[str, str]:
        """Setup before the timed calls (compile a fused step for like's dtype and device, where a call
        of the map on `rows` rows, the most it will see, is large enough to take it); the notes say how
        the map runs."""
        return {}

    # vjp(x, f, df) -> dx: x's gradient through the map in closed form, for the backward: f is the
    # map at x (the query's features, or the key's at a log-scale the backward holds fixed) and df
    # its gradient, which vjp may overwrite. None: the backward records the map with autograd
    # (variants.native.linearized.grad), the slower and readable form.
    vjp = None


def rescale(state, z, scale, s_chunk):
    """Bring running sums and a new chunk to a common log-scale (the larger one).

    Returns (state, z, scale, weight of the chunk). Out of place when autograd records (it sees
    every step), in place otherwise: the state is (m × d) per head, m/n of the output.
    """
    top = s_chunk if scale is None else torch.maximum(scale, s_chunk)
    if scale is not None:
        factor = torch.exp(scale - top)  # (B, H, 1, 1)
        if recording(state):
            state, z = state * factor, z * factor.squeeze(-1)  # z is (B, H, m)
        else:
            state.mul_(factor)
            z.mul_(factor.squeeze(-1))
    return state, z, top, torch.exp(s_chunk - top)


def weigh(phi: FeatureMap, state, z, scale, fk, s):
    """A chunk's key features fk (in place) and the running sums brought to a common log-scale;
    returns (state, z, scale). A map without a scale (`scaled` False) skips it: its weights are 1."""
    if not phi.scaled:
        return state, z, s
    state, z, scale, weight = rescale(state, z, scale, s)
    fk.mul_(weight)  # weight: (B, H, 1, 1)
    return state, z, scale


def recording(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def add_product(state, fk, v):
    """state + φ(k)ᵀ v, (B, H, m, d), in place: accumulated by the GEMM itself (baddbmm_), so no
    (m × d) product is held beside the state (at n ≤ m, an output's size). No autograd here."""
    b, h, c, m = fk.shape
    state.view(b * h, m, -1).baddbmm_(fk.reshape(b * h, c, m).transpose(1, 2), v.reshape(b * h, c, -1))
    return state


def normalizer(f, z):
    """φ(q)ᵀz for each row: (B, H, C) from f (B, H, C, m) and z (B, H, m). An einsum, not a GEMM
    with one column, which MKL runs several times slower (docs/performance.md, "Figures behind the code's choices")."""
    return torch.einsum("bhcm,bhm->bhc", f, z)


def zero_state(q, m: int):
    """S (B, H, m, d) and z (B, H, m), zero."""
    b, h, _, d = q.shape
    return q.new_zeros(b, h, m, d), q.new_zeros(b, h, m)


def masked_rows(m: int, d: int) -> int:
    """Rows of a causal chunk where steps are sized to the cache: at most 2·m·d/(m + d), so that the
    chunk's masked products (φ(q)φ(k)ᵀ and its product with v: 2·C²·(m + d) FLOPs) cost no more
    than its share of the algorithm's (4·C·m·d), which alone is counted. Linear (m = d = 64): 64
    rows, where 256 were slower (docs/performance.md, "Figures behind the code's choices")."""
    return max(32, 2 * m * d // (m + d))


def rows_per_step(
    phi: FeatureMap, q: torch.Tensor, cap: int, causal: bool = False, least: int = 16, more: int = 0
) -> int:
    """Rows of a chunk: at most `cap`, and few enough that the chunk's features and products stay
    within `step_elements`, so a small n holds about one output too. A row of each head holds the
    map's `held` tensors of m and 2d (its input's copies, the product with the state); a causal
    chunk holds φ(q) and φ(k) at once and 6d (the local and carried products, their sum, the quotient);
    a backward chunk `more` tensors of m besides the map's."""
    b, h, _, d = q.shape
    per_row = (2 if causal else 1) * (phi.held + more) * features_of(phi, d) + (6 if causal else 2) * d
    return max(least, min(cap, step_elements(q) // (b * h * per_row)))


def features_of(phi: FeatureMap, d: int) -> int:
    return getattr(phi, "features", d)


def with_grad(fn, x):
    """(x as a leaf that requires grad, fn(x) recorded by autograd)."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        return x, fn(x)


def row_chunks(n: int, step: int) -> list[slice]:
    return [slice(r0, min(r0 + step, n)) for r0 in range(0, n, step)]
