"""The convolutional layer of the per-layer table (Vaswani et al. 2017, Table 1): O(k·n·D²) time,
O(1) sequential steps, a path of O(log_k n) layers between distant positions.

A layer, not attention: it reads q's H heads as the D = H·d channels of x (B, n, D) and returns
(B, n, D) split into heads; k and v are not used. Kernel width k; `same` padding, or left padding
only when causal (position i sees i−k+1 … i). `separable` = 1 is the depthwise-separable form (a
per-channel kernel, then a 1×1 D×D mixing): O(k·n·D + n·D²). Weights are seeded, no bias.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from variants.impls import to_heads, to_streams, weights_like
from variants.rules import Impl, MemoryClaim, Param, Prepared, Theory, VariantSpec, register, tiles

KERNEL = Param("kernel", 3, "kernel width k", minimum=1, maximum=lambda n: 64)
SEPARABLE = Param(
    "separable", 0, "1: depthwise-separable (k·n·D + n·D²); 0: full (k·n·D²)", minimum=0, maximum=lambda n: 1
)
SEED = Param("seed", 0, "seed of the weights", minimum=0)


def conv_weights(x: torch.Tensor, params: dict) -> tuple[torch.Tensor, ...]:
    """Full: W (D, D, k). Separable: the depthwise W (D, 1, k) and the pointwise P (D, D, 1)."""
    dim, k, seed = x.shape[-1], params["kernel"], params["seed"]
    if not params["separable"]:
        return weights_like((dim, dim, k), 1, seed, x)
    return weights_like((dim, 1, k), 1, seed, x) + weights_like((dim, dim, 1), 1, seed + 1, x)


def padding(k: int, causal: bool) -> tuple[int, int]:
    return (k - 1, 0) if causal else ((k - 1) // 2, k // 2)


def reference(x: torch.Tensor, params: dict, causal: bool, ws) -> torch.Tensor:
    """The windows written out: x padded, unfolded to (B, n, D, k), then one einsum per weight."""
    k = params["kernel"]
    windows = F.pad(x, (0, 0, *padding(k, causal))).unfold(1, k, 1)  # (B, n, D, k)
    if not params["separable"]:
        return torch.einsum("bnik,oik->bno", windows, ws[0])
    depthwise = torch.einsum("bnik,ik->bni", windows, ws[0][:, 0])
    return depthwise @ ws[1][:, :, 0].T  # (B, n, D)


def native(x: torch.Tensor, params: dict, causal: bool, ws) -> torch.Tensor:
    """torch's conv1d (oneDNN on CPU, cuDNN on CUDA) on (B, D, n)."""
    y = F.pad(x.transpose(1, 2), padding(params["kernel"], causal))  # (B, D, n + k − 1)
    if not params["separable"]:
        return F.conv1d(y, ws[0]).transpose(1, 2)
    return F.conv1d(F.conv1d(y, ws[0], groups=x.shape[-1]), ws[1]).transpose(1, 2)


def make(name: str, run, cost: str, library: str | None = None) -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        x = to_streams(q)
        ws = conv_weights(x, params)
        return Prepared(
            lambda: to_heads(run(x, params, causal, ws), q.shape[1]), {"weights_s": time.perf_counter() - start}
        )

    return Impl(name, prepare, cost=cost, library=library)


def theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec):
    dim, k, bn = num_heads * head_dim, params["kernel"], batch * seq_len
    weights = (k * dim + dim * dim if params["separable"] else k * dim * dim) * dtype_bytes
    rows = 2 * bn * dim * dtype_bytes  # x read, the output written
    # traffic: each tile of a sequence's rows reads the weights again
    moved = {
        "compulsory_bytes": rows + weights,
        "fixed_bytes": weights,
        "traffic_bytes": rows + batch * len(tiles(seq_len)[0]) * weights,
    }
    if params["separable"]:
        return Theory(
            flops=2 * bn * k * dim,
            claimed_exponent_n=1.0,
            claimed_exponent_d=2.0,
            extra_flops={"pointwise": 2 * bn * dim * dim},
            note="depthwise k·n·D, pointwise n·D² (the D² term leads once D > k)",
            **moved,
        )
    return Theory(flops=2 * bn * k * dim * dim, claimed_exponent_n=1.0, claimed_exponent_d=2.0, **moved)


SPEC = register(
    VariantSpec(
        name="conv",
        family="layer",
        cross_note="is a layer over one sequence (q's features), not attention between two",
        padding_note="is a layer, not attention: padding is not built for it",
        summary="Convolutional layer over q's features (k, v unused): O(k·n·D²), or separable O(k·n·D + n·D²).",
        source="Vaswani et al. 2017, Attention Is All You Need (Table 1); Chollet 2017 (separable)",
        memory=MemoryClaim(
            "the convolution (Vaswani et al. 2017, Table 1): one output a position; training keeps its input and "
            "output",
            forward=1.0,
            training=1.0,
        ),
        params=(KERNEL, SEPARABLE, SEED),
        theory_fn=theory,
        impls={
            i.name: i
            for i in (
                make("dense", reference, "O(k·n·D²): windows unfolded, one einsum"),
                make(
                    "native", native, "O(k·n·D²): torch conv1d (separable: depthwise then 1×1)", library="torch conv1d"
                ),
            )
        },
    )
)
