"""What a variant declares: its parameters, the problem a capability check sees, and each implementation
(capability as data, xformers' `ops/fmha` style: devices and dtypes, and the reasons a problem cannot run)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from variants.rules.differs import Differs

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# What an implementation computes: the algorithm's own work; every n² score whatever the pattern
# (a dense mask); or the pattern's tiles at a kernel's block granularity.
WORK = {
    "algorithm": "the algorithm's own work",
    "all_pairs": "every n² score, whatever the pattern",
    "blocks": "the blocks the pattern touches, at the kernel's tile size",
}
# How an implementation runs a padded batch: the padding in its mask (it computes what its mask costs),
# or each sequence's valid prefix as its own call (the suite slices them; `VariantSpec.prepare`).
PADDING = {"mask": "a key-padding mask over the padded batch", "packed": "each sequence's valid prefix, one call each"}


@dataclass(frozen=True)
class Param:
    """One variant parameter: its default (or a rule deriving it from n) and its allowed range."""

    name: str
    default: int | float | None
    doc: str
    minimum: int | float = 0
    maximum: Callable[[int], int] | None = None  # n -> largest allowed value, where it depends on n
    kind: type = int
    derive: Callable[[int], int] | None = None  # n -> default, for defaults such as ceil(sqrt(n))
    choices: tuple[str, ...] | None = None  # a named choice (rnn's cell) instead of a number

    def default_for(self, seq_len: int) -> int | float | None:
        return self.derive(seq_len) if self.derive is not None else self.default

    def describe_default(self) -> str:
        return self.doc.split(";")[0] if self.derive is not None else repr(self.default)


def sqrt_n(seq_len: int) -> int:
    """The Sparse Transformer's default stride/block: ceil(sqrt(n))."""
    return max(1, math.isqrt(seq_len - 1) + 1) if seq_len > 1 else 1


@dataclass(frozen=True)
class Problem:
    """What a capability check needs to know about one call (no tensors)."""

    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    batch: int = 1
    num_heads: int = 8
    num_kv_heads: int | None = None
    seq_len: int = 1024  # queries
    head_dim: int = 64
    causal: bool = False
    params: tuple[tuple[str, Any], ...] = ()  # the variant's resolved parameters (a library's bias needs them)
    kv_len: int | None = None  # keys, where they are another sequence (cross attention); None: seq_len
    padded: bool = False  # a batch of sequences of different valid lengths, padded to seq_len
    decode: bool = False  # one query, the last position, against seq_len keys

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def key_len(self) -> int:
        return self.seq_len if self.kv_len is None else self.kv_len

    @property
    def cross(self) -> bool:
        return self.key_len != self.seq_len


class Prepared:
    """A zero-argument closure that runs one implementation on fixed inputs (the timed call).

    `setup_s` holds named setup costs (mask construction, compile) measured while preparing,
    kept apart from the call that is timed.
    """

    def __init__(
        self,
        fn: Callable[[], torch.Tensor],
        setup_s: Mapping[str, float] | None = None,
        notes: Mapping[str, str] | None = None,
    ):
        self.fn = fn
        self.setup_s = dict(setup_s or {})
        self.notes = dict(notes or {})  # how it ran, e.g. which kernel or compile mode was used

    def __call__(self) -> torch.Tensor:
        return self.fn()


# prepare(q, k, v, causal=..., params=...) -> Prepared
PrepareFn = Callable[..., Prepared]


@dataclass(frozen=True)
class Impl:
    """One way to compute a variant; `cost` states the implementation's own complexity."""

    name: str
    prepare: PrepareFn
    cost: str
    devices: tuple[str, ...] | None = None  # None: any device torch has
    dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES
    supports_causal: bool = True
    # Library-specific checks beyond the table above (an import that fails, xformers' own reasons).
    extra_reasons: Callable[[Problem], list[str]] | None = None
    # Traits, read by the suite instead of checking implementation names:
    work: str = "algorithm"  # one of WORK: whose work this implementation does
    countable: bool = True  # FlopCounterMode can trace it (on meta tensors)
    library: str | None = None  # the library kernel it calls, where it calls one
    differs: Differs | None = None  # a library whose definition differs from the variant's
    padding: str | None = "packed"  # one of PADDING; None: it cannot run a padded batch
    decode: bool = True  # it runs a decode step (one query against the keys), where its variant has one
    # its leading term's work reads rows of K and V at random (a key list per query): the cost model takes the
    # run's rate for such gathers against n as the machine's (suite.machine.gathers, suite.analyse.cost)
    gathers: bool = False

    def __post_init__(self):
        if self.work not in WORK:
            raise ValueError(f"impl {self.name}: work={self.work!r} (allowed: {', '.join(WORK)})")
        if self.padding is not None and self.padding not in PADDING:
            raise ValueError(f"impl {self.name}: padding={self.padding!r} (allowed: {', '.join(PADDING)}, None)")

    def reasons(self, problem: Problem) -> list[str]:
        out = []
        if self.devices is not None and problem.device not in self.devices:
            out.append(f"device={problem.device} (supported: {', '.join(self.devices)})")
        else:
            out.extend(device_reasons(problem.device))
        if problem.dtype not in self.dtypes:
            allowed = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            out.append(f"dtype={str(problem.dtype).removeprefix('torch.')} (supported: {allowed})")
        if problem.causal and not self.supports_causal:
            out.append("causal=True (this implementation is non-causal only)")
        if not out and self.extra_reasons is not None:
            out.extend(self.extra_reasons(problem))
        return out


def device_reasons(device: str) -> list[str]:
    """Why torch cannot compute on `device` here ([] when it can): `torch.<device>.is_available()`."""
    if device == "cpu":
        return []
    backend = getattr(torch, device, None)
    available = getattr(backend, "is_available", None)
    if available is None:
        return [f"device={device}: torch has no such backend"]
    if not available():
        return [f"device={device}: torch.{device}.is_available() is False on this machine"]
    return []
