"""What the literature claims for one shape: pairs, FLOPs, bytes and exponents (docs/CLAIMS.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# NB: softmax is counted as 5 operations per allowed pair (max, subtract, exp, sum, divide).
# It is reported apart from `flops`, as docs/CLAIMS.md asks; only the convention is ours.
SOFTMAX_OPS_PER_PAIR = 5
MODES = ("fwd", "fwd_bwd", "decode")
# NB: backward is counted as twice the forward (two matmuls per forward matmul), the usual convention.
FWD_BWD_FLOP_FACTOR = 3
# Bytes (docs/CLAIMS.md, "Bytes"): the traffic model visits the queries in tiles of this many rows,
# and an index entry (a drawn key, a sort's permutation) is torch's int64.
TILE_ROWS = 128
INDEX_BYTES = 8
# The named terms that are matrix products: the roofline's compute floor counts them with `flops`,
# at the matmul peak (docs/CLAIMS.md, "What is measured"); the elementwise terms (the softmax, a
# normalizer, a gate, nonlinearities) it leaves out, as FlashAttention's count leaves the softmax out.
PRODUCT_TERMS = frozenset({"projections", "feature_map", "hashing", "pointwise"})


@dataclass(frozen=True)
class MemoryClaim:
    """A variant's claim of the extra memory one call keeps, as an exponent in n, with its source
    (docs/CLAIMS.md, "Memory: what a call keeps"). `forward`: the forward's, None where it is the time
    claim's own (a pattern that keeps its allowed scores: its pairs); `training`: what forward and backward
    keep together (the backward's saved tensors), None where it is the forward's. A decode step carries no
    memory claim. The claim is the algorithm's: an implementation that keeps more is measured, and refuted."""

    source: str
    forward: float | None = None
    training: float | None = None

    def exponent(self, mode: str, time_exponent: float) -> float | None:
        """The claim for `mode`, given the forward's time claim in n (the pairs' exponent)."""
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} (allowed: {', '.join(MODES)})")
        forward = time_exponent if self.forward is None else self.forward
        if mode == "decode":
            return None
        return forward if mode == "fwd" or self.training is None else self.training


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
    # Bytes (docs/CLAIMS.md, "Bytes"): every input read once and every output written once, plus the
    # algorithm's own data; and what the algorithm reads and writes when its working set leaves the cache
    compulsory_bytes: int | None = None
    traffic_bytes: int | None = None
    fixed_bytes: int = 0  # the algorithm's own data (index entries, parameters), inside both counts
    state_bytes: int | None = None  # a running state, which a decode step reads and writes (linearized S, z)
    # the claim of extra memory in n for this mode (MemoryClaim.exponent): None where nothing is claimed
    claimed_memory_exponent_n: float | None = None

    @property
    def total_flops(self) -> int:
        return self.flops + sum(self.extra_flops.values())


def io_bytes(
    *, batch: int, num_heads: int, num_kv_heads: int, query_rows: int, key_rows: int, head_dim: int, dtype_bytes: int
) -> int:
    """Q read and O written (B·H·rows·d each), K and V read (B·H_kv·key_rows·d each)."""
    return 2 * batch * head_dim * dtype_bytes * (num_heads * query_rows + num_kv_heads * key_rows)


def tiles(rows: int) -> tuple[list[int], list[int]]:
    """The traffic model's query tiles: starts and ends of TILE_ROWS consecutive rows."""
    starts = list(range(0, rows, TILE_ROWS))
    return starts, [min(s + TILE_ROWS, rows) for s in starts]


def score_theory(
    *,
    pairs: int,
    batch: int,
    num_heads: int,
    num_kv_heads: int,
    seq_len: int,
    head_dim: int,
    dtype_bytes: int,
    exponent_n: float,
    note: str = "",
    exponents_qk: tuple[float, float] | None = None,
    query_len: int | None = None,
    key_reads: int | None = None,
    index_entries: int = 0,
) -> Theory:
    """Score-based attention: 4·B·H·P·d forward FLOPs, softmax as a separate term; `seq_len` is
    the keys' length (K and V bytes), `query_len` the queries' (seq_len where not given). Bytes:
    every query, key and value once (the diagonal is in every pattern), `key_reads` the K and V
    rows the algorithm's tiles read per batch and K/V head, `index_entries` the pattern's own."""
    exponent_q, exponent_k = exponents_qk or (None, None)
    shape = dict(
        batch=batch,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        query_rows=query_len or seq_len,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
    )
    index = INDEX_BYTES * index_entries
    return Theory(
        flops=score_flops(batch, num_heads, pairs, head_dim),
        claimed_exponent_n=exponent_n,
        claimed_exponent_d=1.0,
        pairs=pairs,
        extra_flops={"softmax": SOFTMAX_OPS_PER_PAIR * batch * num_heads * pairs},
        kv_bytes=2 * batch * num_kv_heads * seq_len * head_dim * dtype_bytes,
        note=note,
        exponent_q=exponent_q,
        exponent_k=exponent_k,
        compulsory_bytes=io_bytes(**shape, key_rows=seq_len) + index,
        fixed_bytes=index,
        traffic_bytes=None if key_reads is None else io_bytes(**shape, key_rows=key_reads) + index,
    )


def for_mode(theory: Theory, mode: str, *, batch: int, num_heads: int, seq_len: int, head_dim: int) -> Theory:
    """The forward theory adjusted for what a mode times (docs/CLAIMS.md, "Modes").

    fwd_bwd: 3× the forward FLOPs; compulsory bytes twice the forward's tensors (each input's
    gradient written, the output's read) and its own data once; traffic 3× the forward's, as FLOPs.
    decode: `decode_step`, which the registry calls with the last row.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} (allowed: {', '.join(MODES)})")
    if mode == "fwd_bwd":
        compulsory, traffic = theory.compulsory_bytes, theory.traffic_bytes
        return replace(
            theory,
            flops=FWD_BWD_FLOP_FACTOR * theory.flops,
            compulsory_bytes=None if compulsory is None else 2 * compulsory - theory.fixed_bytes,
            traffic_bytes=None if traffic is None else FWD_BWD_FLOP_FACTOR * traffic,
        )
    return theory


def decode_step(
    forward: Theory,
    *,
    last_row: int | None,
    step: Theory | None,
    batch: int,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int = 1,
    dtype_bytes: int = 4,
    index_entries: int = 0,
) -> Theory:
    """One query, the last position, against a cache of n keys (docs/CLAIMS.md, "Modes"): a score-based
    variant scores its pattern's last row (`last_row` pairs); a linearized one adds one key to its
    running state and reads one query out of it (`step`: its work at n = 1, whatever the cache). The
    claim is one power of n under the forward's: the last row holds an average row's share of P.
    Bytes, both counts: the query, the last row's keys and values (and its `index_entries`) and the
    output; a step's q, k, v and output, and its state read and written."""
    exponent = forward.claimed_exponent_n - 1
    if last_row is None:
        moved = (
            None
            if step.compulsory_bytes is None or step.state_bytes is None
            else (step.compulsory_bytes + 2 * step.state_bytes)
        )
        return replace(
            step,
            claimed_exponent_n=exponent,
            kv_bytes=None,
            note="one step of the running state",
            compulsory_bytes=moved,
            traffic_bytes=moved,
        )
    moved = INDEX_BYTES * index_entries + io_bytes(
        batch=batch,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        query_rows=1,
        key_rows=last_row,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
    )
    return replace(
        forward,
        pairs=last_row,
        flops=score_flops(batch, num_heads, last_row, head_dim),
        claimed_exponent_n=exponent,
        extra_flops={"softmax": SOFTMAX_OPS_PER_PAIR * batch * num_heads * last_row},
        compulsory_bytes=moved,
        traffic_bytes=moved,
        fixed_bytes=INDEX_BYTES * index_entries,
    )
