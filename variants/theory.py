"""What the literature claims for one shape: pairs, FLOPs, bytes and exponents (docs/CLAIMS.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# NB: softmax is counted as 5 operations per allowed pair (max, subtract, exp, sum, divide).
# It is reported apart from `flops`, as docs/CLAIMS.md asks; only the convention is ours.
SOFTMAX_OPS_PER_PAIR = 5
MODES = ("fwd", "fwd_bwd", "decode")
# NB: backward is counted as twice the forward (two matmuls per forward matmul), the usual convention.
FWD_BWD_FLOP_FACTOR = 3


def score_flops(batch: int, num_heads: int, pairs: int, head_dim: int) -> int:
    """4·B·H·P·d: 2·P·d for QKᵀ and 2·P·d for PV, per head (docs/CLAIMS.md)."""
    return 4 * batch * num_heads * pairs * head_dim


@dataclass(frozen=True)
class Theory:
    """The analytic cost of one forward call; `flops` follows docs/CLAIMS.md exactly."""

    flops: int
    claimed_exponent_n: float
    pairs: int | None = None  # allowed (i, j) per batch and head
    claimed_exponent_d: float | None = None
    extra_flops: dict[str, int] = field(default_factory=dict)  # named terms apart from `flops`
    kv_bytes: int | None = None  # bytes of K and V together
    note: str = ""
    # Cross attention (n_q queries, n_k keys): the exponents when one length grows and the other is fixed
    exponent_q: float | None = None
    exponent_k: float | None = None

    @property
    def total_flops(self) -> int:
        return self.flops + sum(self.extra_flops.values())


def score_theory(*, pairs: int, batch: int, num_heads: int, num_kv_heads: int, seq_len: int,
                 head_dim: int, dtype_bytes: int, exponent_n: float, note: str = "",
                 exponents_qk: tuple[float, float] | None = None) -> Theory:
    """Score-based attention: 4·B·H·P·d forward FLOPs, softmax as a separate term; `seq_len` is
    the keys' length (K and V bytes)."""
    exponent_q, exponent_k = exponents_qk or (None, None)
    return Theory(
        flops=score_flops(batch, num_heads, pairs, head_dim),
        claimed_exponent_n=exponent_n,
        claimed_exponent_d=1.0,
        pairs=pairs,
        extra_flops={"softmax": SOFTMAX_OPS_PER_PAIR * batch * num_heads * pairs},
        kv_bytes=2 * batch * num_kv_heads * seq_len * head_dim * dtype_bytes,
        note=note, exponent_q=exponent_q, exponent_k=exponent_k,
    )


def for_mode(theory: Theory, mode: str, *, batch: int, num_heads: int, seq_len: int, head_dim: int) -> Theory:
    """The forward theory adjusted for what a mode times (docs/CLAIMS.md, "Modes").

    fwd_bwd: 3× the forward FLOPs. decode: `decode_step`, which the registry calls with the last row.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} (allowed: {', '.join(MODES)})")
    if mode == "fwd_bwd":
        return replace(theory, flops=FWD_BWD_FLOP_FACTOR * theory.flops)
    return theory


def decode_step(forward: Theory, *, last_row: int | None, step: Theory | None, batch: int, num_heads: int,
                head_dim: int) -> Theory:
    """One query, the last position, against a cache of n keys (docs/CLAIMS.md, "Modes"): a score-based
    variant scores its pattern's last row (`last_row` pairs); a linearized one adds one key to its
    running state and reads one query out of it (`step`: its work at n = 1, whatever the cache). The
    claim is one power of n under the forward's: the last row holds an average row's share of P."""
    exponent = forward.claimed_exponent_n - 1
    if last_row is None:
        return replace(step, claimed_exponent_n=exponent, kv_bytes=None, note="one step of the running state")
    return replace(forward, pairs=last_row, flops=score_flops(batch, num_heads, last_row, head_dim),
                   claimed_exponent_n=exponent, extra_flops={"softmax": SOFTMAX_OPS_PER_PAIR * batch * num_heads * last_row})
