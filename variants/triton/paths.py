"""The `triton` implementation of each variant whose claim needs structure, attached to the variant
(`registry.attach`): its plan, the pattern as the kernel families' parts (variants.triton), built in
setup from the variant's own definitions. The claim belongs to the algorithm, the cost to this
implementation: each states its own."""

from __future__ import annotations

import torch

from variants.catalog import bigbird, linear, performer, random_keys, rfa
from variants.impls import peer
from variants.rules import Differs, Problem, attach
from variants.triton.impl import triton_impl


def _union():
    from variants.triton import union  # NB: imports triton: only inside a plan (setup)

    return union


def sliding_window(n, causal, params, like):
    return (_union().Band("window", params["window"]),)


def neighborhood(n, causal, params, like):
    return (_union().Band("neighborhood", params["kernel"]),)


def global_rows(n: int, g: int, gap: int) -> tuple:
    """Rows i < g against every key; rows i >= g against the g global keys j with i − j > gap."""
    u = _union()
    return (u.Band("rect", n, -n, rows=(0, g)), u.Band("rect", g, gap, rows=(g, n)))


def global_tokens(n, causal, params, like):
    g = min(params["tokens"], n)
    own = _union().Band("window", 0, rows=(g, n) if g else None)  # rows i >= g: their own key
    return (own, *global_rows(n, g, -n)) if g else (own,)


def random(n, causal, params, like):
    i = torch.arange(n)[:, None]
    draw = random_keys.draw(n, params["keys"], params["seed"])
    keys = torch.cat([i, draw], dim=1)  # itself, then the draw
    valid = torch.cat([torch.ones_like(i, dtype=torch.bool), random_keys.random_valid(n, draw, causal)], dim=1)
    return (_union().KeyList.of(keys, valid, like),)


def big_bird(n, causal, params, like):
    g, w = min(params["tokens"], n), params["window"]
    _, idx, valid = bigbird.extra_sets(n, causal, params)
    valid = valid & (torch.arange(n)[:, None] >= g)  # rows i < g are global rows: every key, apart
    u = _union()
    return (u.Band("window", w, rows=(g, n) if g else None), u.KeyList.of(idx, valid, like), *global_rows(n, g, w))


def fixed(n, causal, params, like):
    l, c = params["block"], params["summary"]
    u = _union()
    return (u.Band("blocks", l),) + ((u.Band("summary", l, c),) if c else ())


def strided(n, causal, params, like):
    l = params["stride"]
    u = _union()
    return (u.Band("window", l - 1), u.Residues(l))  # |i − j| < l, then j ≡ i (mod l), j ≠ i


SOFTMAX_PATHS = {
    "sliding_window": (
        sliding_window,
        "O(n·(2w + 128)·d): blocks of 128 queries against the key blocks of 64 "
        "their window reaches, one kernel, online softmax in registers",
    ),
    "neighborhood": (
        neighborhood,
        "O(n·(K + 128)·d): blocks of 128 queries against the key blocks of 64 their K keys span, one kernel",
    ),
    "global": (
        global_tokens,
        "O(n·g·d): g full rows, g global keys per row and its own, as three band kernels merged by log-sum-exp",
    ),
    "random": (
        random,
        "O(n·r·d): each row's r + 1 keys gathered by index, online softmax; dK, dV by key "
        "over the lists transposed in setup",
    ),
    "bigbird": (
        big_bird,
        "O(n·(w + g + r)·d): a band, the global keys and rows, the random keys gathered, merged by log-sum-exp",
    ),
    "strided": (
        strided,
        "O(n·l·d + n²/l·d): a band of reach l − 1, then attention within each residue class, "
        "rows and keys m·l + r addressed by index arithmetic (no copies)",
    ),
    "fixed": (fixed, "O(n·l·d + n·(c·n/l)·d): own blocks as a band, summary keys by index arithmetic"),
}

for _name, (_plan, _cost) in SOFTMAX_PATHS.items():
    attach(_name, triton_impl(_plan, cost=_cost))


# ------------------------------------------------------------------------------- linearized
MAX_FEATURES = 256  # variants.triton.chunk: a row's features in one tile
FEATURE_KINDS = {"linear": "elu", "performer": "favor", "rfa": "fourier"}


def linearized(name: str, features_fn):
    """The plan of a linearized variant: its feature map (drawn in setup, as the native path's) for the
    chunk kernels, which compute it in their registers, and in torch for the backward."""

    def plan(n, causal, params, like):
        from variants.triton import chunk  # NB: imports triton

        # NB: float16 computes the map in float32 (its range: FAVOR+'s key features reach 1e-8), here and in
        # the kernels (variants.triton.chunk.fwd.chunk_dtypes)
        half = like.dtype == torch.float16
        phi = features_fn(params, like.new_empty((1, 1, 1, like.shape[-1]), dtype=torch.float32) if half else like)
        kind = {"elu": chunk.ELU, "favor": chunk.FAVOR, "fourier": chunk.FOURIER}[FEATURE_KINDS[name]]
        w = None if kind == chunk.ELU else phi.omega if kind == chunk.FAVOR else torch.cat([phi.omega, phi.omega])
        return chunk.Features(kind, w, getattr(phi, "features", None), phi.query, lambda x: phi.key(x)[0])

    return plan


def run_linearized(q, k, v, phi, causal):
    from variants.triton.chunk import linear_attention

    return linear_attention(q, k, v, phi, causal)


def feature_reasons(problem: Problem) -> list[str]:
    params = dict(problem.params)
    m = params.get("features")
    m = problem.head_dim if m is None else (2 * m if "sigma" in params else m)  # rfa: sin and cos of m frequencies
    out = []
    if max(m, problem.head_dim) > MAX_FEATURES:
        out.append(
            f"features={m}, head_dim={problem.head_dim}: the triton chunk kernels hold a row's features in "
            f"one tile (at most {MAX_FEATURES})"
        )
    bf = max(16, 1 << (max(m, problem.head_dim) - 1).bit_length())  # the kernels' feature tile
    states = (
        -(-problem.key_len // (64 if bf <= 128 else 32)) * problem.batch * problem.num_heads * bf * problem.head_dim
    )
    if problem.causal and states >= 2**31:
        out.append(f"causal states of {states} entries >= 2^31: the triton chunk kernels' offsets are 32-bit")
    if params.get("gate"):
        out.append("gate=1: the gated recurrence has no triton kernel here (rfa's gate=0 form has)")
    return out


LINEARIZED_PATHS = {
    "linear": (
        linear.elu_features,
        "O(n·d²): chunks of 64 rows, elu+1 in the kernels; causal by a state per "
        "chunk (d × d) and the masked 64 × 64 form within it",
    ),
    "performer": (
        performer.favor_features,
        "O(n·m·d): FAVOR+ features in the kernels (a pass for the keys' "
        "stabilizer), chunks of 32 rows, a state per chunk (m × d) when causal",
    ),
    "rfa": (
        rfa.fourier_features,
        "O(n·m·d): sin/cos features in the kernels, chunks of 32 rows, a state per chunk (2m × d) when causal",
    ),
}

for _name, (_features, _cost) in LINEARIZED_PATHS.items():
    attach(_name, triton_impl(linearized(_name, _features), run_linearized, cost=_cost, extra_reasons=feature_reasons))


# ------------------------------------------------------------------------------- the yardstick
def fla_call(q, k, v, causal, params):
    """flash-linear-attention's chunk kernel (fla-core's `chunk_linear_attn`) on φ = elu + 1 applied in
    the call, heads-second tensors handed over as views; scale 1: φ(q)ᵀφ(k) as `linear` scores."""
    import torch.nn.functional as F
    from fla.ops.linear_attn import chunk_linear_attn

    def run():
        qf, kf = (F.elu(x).add_(1).transpose(1, 2) for x in (q, k))  # (B, n, H, d)
        out, _ = chunk_linear_attn(qf, kf, v.transpose(1, 2), scale=1.0, normalize=True)
        return out.transpose(1, 2)

    return run


def fla_reasons(problem: Problem) -> list[str]:
    return [] if problem.causal else ["causal=False: chunk_linear_attn is causal only"]


attach(
    "linear",
    peer(
        "fla-core",
        "fla",
        fla_call,
        reasons=fla_reasons,
        devices=("cuda",),
        install="pip install fla-core (flash-linear-attention's kernels: pure Python and Triton)",
        cost="O(n·d²): flash-linear-attention's chunk form (chunk_simple_gla without gates), the normalizer by a "
        "cumulative sum of φ(k); elu + 1 as two ops in the call",
        differs=Differs(
            "adds 1e-10 to every normalizer and takes (B, n, H, d) tensors (views of ours); its kernels "
            "need a GPU; causal only",
            tol=1e-4,
        ),
    ),
)
