"""A direct count of the bytes a call reads and writes, for the byte formulas' tests (docs/CLAIMS.md, "Bytes").

Under a dispatch mode, every tensor an operator takes whose storage the call did not create is data
the call reads from outside it (its inputs, the algorithm's parameters, whatever setup prepared);
`read_once` sums those storages once each, `read_per_op` once per operator that reads them. What the
call writes out is what it returns.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# operators that take a tensor for its shape, dtype and device only: they read none of its data
SHAPE_ONLY = {"new_zeros", "new_empty", "new_ones", "new_full", "empty_like", "zeros_like", "ones_like", "full_like"}


class Reads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.made: set[int] = set()  # storages an operator of the call produced
        self.outside: dict[int, int] = {}  # storage -> bytes, read from outside the call
        self.per_op = 0  # bytes of outside storages, once per operator reading them

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        taken = set()
        reads = not func.is_view and func.overloadpacket.__name__ not in SHAPE_ONLY  # a view reads nothing
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                key = t.untyped_storage().data_ptr()
                if key not in self.made and key not in taken and reads:
                    self.outside[key] = t.untyped_storage().nbytes()
                    self.per_op += t.untyped_storage().nbytes()
                taken.add(key)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in taken:  # not a view of an input
                self.made.add(t.untyped_storage().data_ptr())
        return out

    @property
    def read_once(self) -> int:
        return sum(self.outside.values())


def written(result) -> int:
    """Bytes of the tensors a call returns (its output, or the gradients of a backward)."""
    return sum(t.numel() * t.element_size() for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor))


def count(fn) -> tuple[Reads, object]:
    with Reads() as reads:
        result = fn()
    return reads, result
