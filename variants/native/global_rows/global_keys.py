"""Every row's view of the global tokens: the g global keys and its own key, scored keys-first.

The g + 1 scores of a chunk of rows lie as (B·H, g + 1, rows), so the softmax runs over dim 1,
vectorized along the rows (torch's CPU softmax over a last dim of 17 pays per row), and every
product is one batched GEMM against the g global keys: kg·qᵀ, pᵀ·vg, and in the backward vg·dOᵀ,
dSᵀ·kg, dS·Q, P·dO. The own key's terms are row-wise dots and scaled rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.native.core import Blocks, KeySet, Partial, cache_elements, exp_, step_elements


@dataclass(frozen=True)
class GlobalKeys(KeySet):
    """Row i scores keys j < g and j = i (a row i < g its own key twice: `GlobalRows` replaces
    those rows and takes none of their keys from here)."""

    g: int

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        b, h, n, d = q.shape
        q3, k3, v3 = (x.reshape(b * h, n, d) for x in (q, k, v))
        dest = Blocks(q3, need_lse, into)
        kg, vg = k3[:, : self.g] * d**-0.5, v3[:, : self.g]
        for rows in self.chunks(q, tensors=2):
            if not need_lse and into is None:
                attend(q3[:, rows], k3[:, rows], v3[:, rows], kg, vg, out=dest.out[:, rows])
                continue
            probs, lse = self._probs(q3[:, rows], k3[:, rows], kg, lse=None)
            dest.put(rows, _apply(probs, vg, v3[:, rows]), lse)
            del probs, lse  # before the next step's (see step_elements)
        return dest.partial(b, h)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """dS = P ∘ (dP − shift)·scale, keys-first; dK and dV of the global keys summed over the
        chunks, then added once."""
        b, h, n, d = q.shape
        g, scale = self.g, d**-0.5
        q3, k3, v3, do3 = (x.reshape(b * h, n, d) for x in (q, k, v, dout))
        dq3, dk3, dv3 = (x.view(b * h, n, d) for x in (dq, dk, dv))  # NB: written in place
        lse3, shift3 = lse.reshape(b * h, n), shift.reshape(b * h, n)
        kg, vg = k3[:, :g] * scale, v3[:, :g]
        dkg, dvg = q3.new_zeros(b * h, g, d), q3.new_zeros(b * h, g, d)
        for rows in self.chunks(q, tensors=3):
            qr, kr, vr, dor = q3[:, rows], k3[:, rows], v3[:, rows], do3[:, rows]
            p, _ = self._probs(qr, kr, kg, lse=lse3[:, rows])  # (BH, g + 1, C)
            dvg.baddbmm_(p[:, :g], dor)
            dv3[:, rows].addcmul_(p[:, g, :, None], dor)
            ds = q3.new_empty(p.shape)
            torch.bmm(vg, dor.transpose(1, 2), out=ds[:, :g])
            torch.linalg.vecdot(dor, vr, out=ds[:, g])
            ds.sub_(shift3[:, None, rows]).mul_(p).mul_(scale)  # dS, scaled
            own = ds[:, g, :, None]
            dq3[:, rows].baddbmm_(ds[:, :g].transpose(1, 2), k3[:, :g]).addcmul_(own, kr)
            dkg.baddbmm_(ds[:, :g], qr)
            dk3[:, rows].addcmul_(own, qr)
            del p, ds, own  # before the next step's (see step_elements)
        dk3[:, :g] += dkg
        dv3[:, :g] += dvg

    def _probs(self, qr, kr, kg, lse):
        """P (BH, g + 1, C) of rows qr against the scaled global keys kg and their own keys kr,
        with the rows' lse (BH, C): computed here when `lse` is None, else P = exp(S − lse)."""
        scores = _scores(qr, kr, kg)
        if lse is None:
            lse = torch.logsumexp(scores, dim=1)
        return exp_(scores.sub_(lse[:, None])), lse

    def chunks(self, q, tensors: int, budget: int = 1 << 18) -> list[slice]:
        """Slices of rows whose scores hold about `budget` elements and, with `tensors` such
        tensors and their rows' outputs, at most `step_elements`."""
        b, h, n, d = q.shape
        per_row = b * h * (tensors * (self.g + 1) + d)
        chunk = max(1, min(cache_elements(q, budget) // (b * h * (self.g + 1)), step_elements(q) // per_row))
        return [slice(start, min(start + chunk, n)) for start in range(0, n, chunk)]


def _apply(probs, vg, vr):
    """The rows' output (BH, C, d): pᵀ·vg over the global keys plus each row's own value."""
    g = vg.shape[1]
    return torch.bmm(probs[:, :g].transpose(1, 2), vg).addcmul_(probs[:, g, :, None], vr)


def attend(q, k, v, kg, vg, out):
    """The output alone: rows (BH, rows, d) against the global keys kg (scaled by 1/√d) and vg
    (BH, g, d) and each its own key, into `out` (BH, rows, d).

    NB: this order (the own key's dot, streaming q and k, before the GEMM that then reads q from the
    cache; the output made in a fresh buffer and copied) took the same time as the GEMMs first and
    writing into `out`, though each GEMM alone was faster so (docs/performance.md, "(16) Global's key sets
    as one, keys-first both ways")."""
    probs = torch.softmax(_scores(q, k, kg), dim=1)  # NB: no autograd here
    return out.copy_(_apply(probs, vg, v))


def _scores(q, k, kg):
    """S (BH, g + 1, C) of rows q (BH, C, d) against the scaled global keys kg (BH, g, d), and in
    row g each row's own key: the own key's dot first (see `attend`)."""
    bh, rows, d = q.shape
    g = kg.shape[1]
    scores = q.new_empty(bh, g + 1, rows)
    torch.linalg.vecdot(q, k, out=scores[:, g]).mul_(d**-0.5)  # q_i·k_i
    torch.bmm(kg, q.transpose(1, 2), out=scores[:, :g])
    return scores
