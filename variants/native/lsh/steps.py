"""Reformer's hash rounds in steps, forward and backward, in a few outputs of memory.

A round's positions are sorted by bucket and cut into chunks; each sorted chunk attends to itself
and the chunk before it. A step takes a group of heads and of sorted chunks: it gathers their query
rows, their keys (the queries, normalized as they are gathered: shared QK) and values from q and v
at their positions, so no sorted copy of the sequence is made. The forward folds each round into
one (out, lse) in place (variants.native.fold: the rounds' merge by their lse is the softmax over
the multiset union of their keys). Under autograd, `Rounds` keeps out and lse, and its backward
recomputes every step's scores against that whole lse (variants.native.core.part_grad), FlashAttention's way:
autograd through the whole rounds kept 57 outputs at n = 1024.
"""

from __future__ import annotations

import functools

import torch

from variants.native.core import exp_, fold, rowdot, softmax_part, step_elements

SELF_SCORE = -5e4  # a query's own key: used only when no other key is allowed
EPS = 1e-12  # F.normalize's floor on a key's norm


def with_previous(x: torch.Tensor) -> torch.Tensor:
    """Each chunk followed by the one before it (the first by the last): (B, H, C, 2·chunk, ...)."""
    return x if x.shape[2] == 1 else torch.cat([x, x.roll(1, dims=2)], dim=3)


class Round:
    """One round's sorted chunks and the steps that cover them, each at most `step_elements` with
    `per_row` elements per sorted row of a head (its scores, gathered rows and products)."""

    def __init__(self, q: torch.Tensor, order: torch.Tensor, chunk: int, per_row: int):
        b, h, n, d = q.shape
        self.n, self.chunk = n, chunk
        self.pos = torch.nn.functional.pad(order, (0, -(-n // chunk) * chunk - n), value=-1).view(b, h, -1, chunk)
        self.kpos = with_previous(self.pos)  # (B, H, C, 2c): -1 marks padding
        self.base = (torch.arange(b * h, device=q.device) * n).view(b, h, 1, 1)  # row of (b, h, 0) in (B·H·n, d)
        per_chunk = b * chunk * per_row
        self.heads = max(1, min(h, step_elements(q) // per_chunk))
        self.group = max(1, step_elements(q) // (per_chunk * self.heads))

    def steps(self):
        """(c0, qp, kp, at_q, at_k) per step: its first sorted chunk, positions (B, h', G, c) and
        (B, h', G, 2c), -1 for padding, and their rows in (B·H·n, d) (padding read as row 0)."""
        h = self.pos.shape[1]
        for h0 in range(0, h, self.heads):
            hs = slice(h0, h0 + self.heads)
            for c0 in range(0, self.pos.shape[2], self.group):
                qp, kp = self.pos[:, hs, c0 : c0 + self.group], self.kpos[:, hs, c0 : c0 + self.group]
                yield c0, qp, kp, flat_rows(qp, self.base[:, hs]), flat_rows(kp, self.base[:, hs])

    def padded(self, c0: int) -> bool:
        """Whether the step from chunk c0 holds padding: the last chunk's tail, which is also the
        first chunk's previous one."""
        return self.n % self.chunk != 0 and (c0 + self.group >= self.pos.shape[2] or c0 == 0)


def flat_rows(at: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    return (at.clamp(min=0) + base).reshape(-1)


def gathered(flat: torch.Tensor, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """`flat`'s rows (B·H·n, d) at `rows`, shaped as the positions `at` (B, H, G, w): (B, H, G, w, d).
    NB: whole rows by index_select; gather with an index expanded over d is slower."""
    return flat.index_select(0, rows).view(*at.shape, flat.shape[-1])


def scores(sq, sk, hidden) -> torch.Tensor:
    """q·k̂/√d of a step (B, H, G, c, 2c), its own key at SELF_SCORE, hidden keys (or None) at −inf.
    A query's own key is the diagonal: a step's keys are its chunk, then the one before (`own`)."""
    s = (sq @ sk.transpose(-1, -2)).mul_(sq.shape[-1] ** -0.5)
    own(s).fill_(SELF_SCORE)
    return s if hidden is None else s.masked_fill_(hidden, float("-inf"))


def own(s: torch.Tensor) -> torch.Tensor:
    """The view of a step's (…, c, 2c) scores at each query's own key: key a of the first c (its
    chunk), the previous chunk holding other positions. NB: was a comparison of positions and a
    masked fill, a pass over the scores each: with `hidden`, a large share of a forward."""
    return s.diagonal(dim1=-2, dim2=-1)


def hidden_keys(qp, kp, causal: bool, padded: bool, pad_rows: bool = False):
    """A step's hidden keys (B, H, G, c, 2c), or None: padding where the step holds any (`padded`,
    from its chunks: no device sync), later keys when causal, and with `pad_rows` padded query rows
    too (the backward sums over them)."""
    parts = []
    if padded:
        parts.append(kp[..., None, :] < 0)
        if pad_rows:
            parts.append(qp[..., :, None] < 0)
    if causal:
        parts.append(kp[..., None, :] > qp[..., :, None])
    return functools.reduce(torch.logical_or, parts) if parts else None


def normalized(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k̂ = x/max(‖x‖, EPS) in place, and the norms (…, 1) it divided by, unfloored."""
    norm = raw.norm(dim=-1, keepdim=True)
    return raw.div_(norm.clamp_min(EPS)), norm


def streamed(q, v, order, chunk: int, causal: bool, out, lse, first: bool) -> None:
    """One round written (first round) or folded (later rounds) into (out, lse) in place."""
    b, h, n, d = q.shape
    rnd = Round(q, order, chunk, per_row=2 * chunk + 8 * d)  # scores; rows, keys (and norms), values, output
    flat, flat_v, flat_out, flat_lse = q.view(-1, d), v.view(-1, d), out.view(-1, d), lse.view(-1)
    for c0, qp, kp, at_q, at_k in rnd.steps():
        sk, _ = normalized(gathered(flat, at_k, kp))
        s = scores(gathered(flat, at_q, qp), sk, hidden_keys(qp, kp, causal, rnd.padded(c0)))
        o, l = softmax_part(s, lambda p: p @ gathered(flat_v, at_k, kp), need_lse=True)  # (B, h', G, c, d), (…, c)
        rows = min(qp.shape[2] * chunk, n - c0 * chunk)  # padded query rows (the last chunk's tail) dropped
        at = at_q.view(b, qp.shape[1], -1)[:, :, :rows].reshape(-1)
        o, l = (
            o.reshape(b, qp.shape[1], -1, d)[:, :, :rows].reshape(-1, d),
            l.reshape(b, qp.shape[1], -1)[:, :, :rows].reshape(-1),
        )
        if not first:
            acc, acc_lse = flat_out.index_select(0, at), flat_lse.index_select(0, at)
            fold(acc, acc_lse, o, l)
            o, l = acc, acc_lse
        flat_out.index_copy_(0, at, o)
        flat_lse.index_copy_(0, at, l)
        del s, o, l  # before the next step's (see variants.native.core.steps)


def rounds_forward(q, v, order, chunk: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Every round of `order` (B, H, R, n) folded into one (out, lse): (B, H, n, d), (B, H, n)."""
    out, lse = torch.empty_like(q), q.new_empty(q.shape[:3])
    for r in range(order.shape[2]):
        streamed(q, v, order[:, :, r], chunk, causal, out, lse, first=r == 0)
    return out, lse


class Rounds(torch.autograd.Function):
    """(q, v) → out of the merged rounds; the forward keeps out, lse and the order (2R/d of an
    output's bytes: 1/8 at R = 4, d = 64), and the backward recomputes each step."""

    @staticmethod
    def forward(ctx, q, v, order, chunk: int, causal: bool):
        with torch.no_grad():
            out, lse = rounds_forward(q, v, order, chunk, causal)
        ctx.save_for_backward(q, v, order, out, lse)
        ctx.chunk, ctx.causal = chunk, causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, v, order, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        shift = rowdot(dout, out)  # (B, H, n)
        dq, dv = torch.zeros_like(q), torch.zeros_like(v)
        # A row with no other key in any round: P = 1/R at its own key in each, so dV gains dO and
        # nothing else does. NB: exp(SELF_SCORE − lse) in float32 missed 1/R by 0.2% (lse's ulp at
        # 5·10⁴ is 0.004): such rows take lse = +∞ (P = 0) in the steps, and dO here.
        alone = lse < SELF_SCORE / 2  # NB: another key scores ≥ −‖q‖/√d: far above, for any ‖q‖ < 2·10⁵
        lse = lse.masked_fill(alone, float("inf"))
        for r in range(order.shape[2]):
            round_grads(q, v, lse, dout, shift, order[:, :, r], ctx.chunk, ctx.causal, dq, dv)
        dv[alone] += dout[alone]
        return dq, dv, None, None, None


def round_grads(q, v, lse, dout, shift, order, chunk: int, causal: bool, dq, dv) -> None:
    """One round's share of dQ and dV, step by step, under the merged rounds' lse:
    P = exp(S − lse), dV += Pᵀ·dO, dS = P ∘ (dO·Vᵀ − shift) but 0 at a query's own key (a constant
    score), dQ += dS·K̂/√d at the queries and J·(dSᵀ·Q/√d) at the keys, with J the Jacobian of the
    normalization: (g − k̂(k̂·g))/‖k‖, or g/EPS where the norm was floored."""
    b, h, n, d = q.shape
    rnd = Round(q, order, chunk, per_row=4 * chunk + 11 * d)  # P, dS; rows, dO, keys, values and their grads
    flat = lambda x: x.reshape(-1, *x.shape[3:])  # noqa: E731  (B·H·n, …)
    fq, fv, fdo, flse, fshift, fdq, fdv = map(flat, (q, v, dout, lse, shift, dq, dv))
    for c0, qp, kp, at_q, at_k in rnd.steps():
        sq, sdo = gathered(fq, at_q, qp), gathered(fdo, at_q, qp)  # (B, h', G, c, d)
        sk, norm = normalized(gathered(fq, at_k, kp))  # (B, h', G, 2c, d), (…, 1)
        hidden = hidden_keys(qp, kp, causal, rnd.padded(c0), pad_rows=True)
        p = exp_(scores(sq, sk, hidden).sub_(flse[at_q].view(*qp.shape, 1)))  # (B, h', G, c, 2c)
        ds = (sdo @ gathered(fv, at_k, kp).transpose(-1, -2)).sub_(fshift[at_q].view(*qp.shape, 1)).mul_(p)
        fdv.index_add_(0, at_k, (p.transpose(-1, -2) @ sdo).view(-1, d))
        del p
        own(ds).fill_(0.0)
        ds.mul_(d**-0.5)
        fdq.index_add_(0, at_q, (ds @ sk).view(-1, d))
        g = ds.transpose(-1, -2) @ sq  # (B, h', G, 2c, d): dK̂
        along = (sk * g).sum(-1, keepdim=True).masked_fill_(norm < EPS, 0.0)
        fdq.index_add_(0, at_k, g.sub_(sk.mul_(along)).div_(norm.clamp_min_(EPS)).view(-1, d))
        del sq, sdo, sk, ds, g, hidden  # before the next step's (see variants.native.core.steps)
