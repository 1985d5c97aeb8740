"""The recurrent layer of the per-layer table (Vaswani et al. 2017, Table 1): O(n·D²) time, O(n)
sequential steps, against self-attention's O(n²·D) and O(1).

A layer, not attention: it reads q's H heads as the D = H·d features of its input x (B, n, D) and
returns its hidden states (B, n, D) split into heads; k and v are not used. The recurrence is causal
by construction, so causal=True and causal=False time the same layer. Weights are seeded.
`cell` is the recurrence: `rnn` (tanh), `gru` or `lstm` (torch's gate order). Claim per step:
gates·(2·D·D + 2·D·D) FLOPs for the input and hidden products (gates: 1, 3, 4), exponent 1 in n and
2 in d at fixed H.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from variants.impls import to_heads, to_streams, weights_like
from variants.rules import Impl, MemoryClaim, Param, Prepared, Theory, VariantSpec, register

CELL = Param("cell", "lstm", "recurrence: rnn (tanh), gru or lstm", kind=str, choices=("rnn", "gru", "lstm"))
SEED = Param("seed", 0, "seed of the weights", minimum=0)
GATES = {"rnn": 1, "gru": 3, "lstm": 4}
MODULES = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


def cell_weights(x: torch.Tensor, params: dict) -> tuple[torch.Tensor, ...]:
    """W_ih, W_hh (gates·D, D) and b_ih, b_hh (gates·D,) on x's device and dtype."""
    dim, rows = x.shape[-1], GATES[params["cell"]] * x.shape[-1]
    return weights_like((rows, dim), 2, params["seed"], x) + weights_like((rows,), 2, params["seed"] + 1, x)


def step(cell: str, gi: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None, w_hh, b_hh):
    """One time step from the input's gate pre-activations gi (B, gates·D): (h, c)."""
    gh = h @ w_hh.T + b_hh
    if cell == "rnn":
        return torch.tanh(gi + gh), c
    if cell == "gru":
        (ir, iz, i_n), (hr, hz, hn) = gi.chunk(3, -1), gh.chunk(3, -1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        return (1 - z) * torch.tanh(i_n + r * hn) + z * h, c
    i, f, g, o = (gi + gh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def reference(x: torch.Tensor, cell: str, ws) -> torch.Tensor:
    """The recurrence written out: input products for all steps at once, then one step at a time."""
    w_ih, w_hh, b_ih, b_hh = ws
    gi = x @ w_ih.T + b_ih  # (B, n, gates·D)
    h = x.new_zeros(x.shape[0], x.shape[-1])
    c = torch.zeros_like(h) if cell == "lstm" else None
    outs = []
    for t in range(x.shape[1]):
        h, c = step(cell, gi[:, t], h, c, w_hh, b_hh)
        outs.append(h)
    return torch.stack(outs, dim=1)  # (B, n, D)


def module(x: torch.Tensor, params: dict) -> nn.Module:
    """torch's layer (oneDNN on CPU, cuDNN on CUDA) with the seeded weights."""
    layer = MODULES[params["cell"]](x.shape[-1], x.shape[-1], batch_first=True, device=x.device, dtype=x.dtype)
    with torch.no_grad():
        for name, w in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), cell_weights(x, params)):
            getattr(layer, name).copy_(w)
    return layer


def dense_impl() -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        x = to_streams(q)
        ws = cell_weights(x, params)
        return Prepared(
            lambda: to_heads(reference(x, params["cell"], ws), q.shape[1]), {"weights_s": time.perf_counter() - start}
        )

    return Impl("dense", prepare, cost="O(n·D²): the steps in a Python loop, one small matmul each")


def native_impl() -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        x = to_streams(q)
        layer = module(x, params)
        return Prepared(lambda: to_heads(layer(x)[0], q.shape[1]), {"weights_s": time.perf_counter() - start})

    return Impl(
        "native",
        prepare,
        cost="O(n·D²): torch.nn.RNN/GRU/LSTM, the steps inside one kernel",
        library="torch.nn RNN/GRU/LSTM",
        countable=False,
    )


def theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec):
    dim, gates = num_heads * head_dim, GATES[params["cell"]]
    weights = 2 * gates * dim * (dim + 1) * dtype_bytes  # W_ih, W_hh (gates·D, D) and their biases
    once = 2 * batch * seq_len * dim * dtype_bytes + weights  # x read, the output written
    return Theory(
        flops=4 * gates * batch * seq_len * dim * dim,
        claimed_exponent_n=1.0,
        claimed_exponent_d=2.0,
        extra_flops={"gate_nonlinearities": 3 * gates * batch * seq_len * dim},
        note=f"n sequential steps of a (B, D)×(D, {gates}D) product: the path length is O(n)",
        # traffic: every step after the first reads W_hh and b_hh again; the input products of all steps are one
        # product, written once and read by their steps
        compulsory_bytes=once,
        fixed_bytes=weights,
        traffic_bytes=once
        + (seq_len - 1) * gates * dim * (dim + 1) * dtype_bytes
        + 2 * batch * seq_len * gates * dim * dtype_bytes,
    )


SPEC = register(
    VariantSpec(
        name="rnn",
        family="layer",
        cross_note="is a layer over one sequence (q's features), not attention between two",
        padding_note="is a layer, not attention: padding is not built for it",
        summary="Recurrent layer over q's features (k, v unused): O(n·D²) time, O(n) sequential steps.",
        source="Vaswani et al. 2017, Attention Is All You Need (Table 1); Hochreiter & Schmidhuber 1997; Cho et al. "
        "2014",
        memory=MemoryClaim(
            "the recurrence (Hochreiter & Schmidhuber 1997): one state a step, its output; training keeps every "
            "step's gates for backpropagation through time",
            forward=1.0,
            training=1.0,
        ),
        params=(CELL, SEED),
        theory_fn=theory,
        impls={"dense": dense_impl(), "native": native_impl()},
    )
)
