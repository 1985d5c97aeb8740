"""The registry: what a variant declares (parameters, theory, implementations) and how it is found.

A variant is data: a frozen `VariantSpec`. Capability is data too (xformers' `ops/fmha` style):
each `Impl` lists the devices and dtypes it runs on, and `VariantSpec.reasons` turns a problem into
the human-readable reasons it cannot run; an empty list means it can.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from variants.differs import Differs  # noqa: F401  (re-exported: peers declare theirs here)
from variants.shapes import NOT_PREFIX, POSITIONAL, cross_reasons, kv_heads_for, padding_reasons
from variants.theory import Theory, decode_step, for_mode

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# What an implementation computes: the algorithm's own work; every n² score whatever the pattern
# (a dense mask); or the pattern's tiles at a kernel's block granularity.
WORK = {"algorithm": "the algorithm's own work", "all_pairs": "every n² score, whatever the pattern",
        "blocks": "the blocks the pattern touches, at the kernel's tile size"}
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

    def __init__(self, fn: Callable[[], torch.Tensor], setup_s: Mapping[str, float] | None = None,
                 notes: Mapping[str, str] | None = None):
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


@dataclass(frozen=True)
class VariantSpec:
    """Everything the suite knows about one attention variant."""

    name: str
    family: str  # "sparse", "linear", "shared_kv", "classic"
    summary: str
    source: str
    params: tuple[Param, ...]
    theory_fn: Callable[..., Theory]
    impls: Mapping[str, Impl]
    kv_heads: str = "equal"  # "equal" (H_kv == H), "one" (MQA), "divides" (GQA)
    mask_fn: Callable[..., Callable] | None = None  # (n, causal, params) -> mask_mod predicate
    row_counts_fn: Callable[..., torch.Tensor] | None = None  # allowed keys per query row
    key_reads_fn: Callable[..., int] | None = None  # (n, causal, params) -> K, V rows read (CLAIMS.md, "Bytes")
    index_fn: Callable[[dict], int] | None = None  # params -> index entries a row stores (drawn keys)
    decode: bool = False  # a decode step: the last position's query against n keys (its pattern's last row)
    # Cross attention (n_q ≠ n_k): defined for the variant, or `cross_note` says why not (CLAIMS.md)
    cross: bool = False
    cross_note: str = POSITIONAL
    # Padding (docs/CLAIMS.md, "Padding"): a padded sequence is the variant at its valid length, with the
    # parameters of the padded length; or `padding_note` says why not
    padding: bool = False
    padding_note: str = NOT_PREFIX
    check_fn: Callable[[int, dict], None] | None = None  # limits between parameters
    approximates: str | None = None  # the variant whose output this one estimates (performer: full)
    extras: Mapping[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------- parameters
    def resolve(self, seq_len: int, params: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults and validate; raise ValueError naming the parameter, value and range."""
        known = {p.name: p for p in self.params}
        for key in params:
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise ValueError(f"{self.name}: unknown parameter {key!r} (allowed: {allowed})")
        out: dict[str, Any] = {}
        for p in self.params:
            value = params.get(p.name)
            if value is None:
                value = p.default_for(seq_len)
                if value is None:  # taken from the inputs (gqa groups)
                    out[p.name] = None
                    continue
                if p.maximum is not None:  # a default means "at most": 16 tokens, or n if fewer
                    value = min(value, p.maximum(seq_len))
            if p.choices is not None:
                if value not in p.choices:
                    allowed = ", ".join(map(repr, p.choices))
                    raise ValueError(f"{self.name}: parameter {p.name}={value!r} (allowed: {allowed})")
                out[p.name] = value
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                p.kind is int and not float(value).is_integer()
            ):
                raise ValueError(
                    f"{self.name}: parameter {p.name}={value!r} must be {p.kind.__name__}"
                )
            value = p.kind(value)
            upper = p.maximum(seq_len) if p.maximum is not None else None
            if value < p.minimum or (upper is not None and value > upper):
                allowed = f">= {p.minimum}" if upper is None else f"{p.minimum}..{upper} for n={seq_len}"
                raise ValueError(f"{self.name}: parameter {p.name}={value!r} out of range (allowed: {allowed})")
            out[p.name] = value
        if self.check_fn is not None:
            self.check_fn(seq_len, out)
        return out

    def explicit(self, params: Mapping[str, Any]) -> frozenset[str]:
        """Names of parameters the caller fixed (a fixed block changes the fixed pattern's claim)."""
        return frozenset(k for k, v in params.items() if v is not None)

    # ----------------------------------------------------------------- capability
    def reasons(self, impl: str, params: Mapping[str, Any] | None = None, **problem: Any) -> list[str]:
        """Why `impl` cannot run this problem (with these parameters, defaults where not given)
        here; an empty list means it can."""
        shape = Problem(**problem)
        implementation = self._impl(impl)
        why = (cross_reasons(self, shape) if shape.cross else []) + (
            padding_reasons(self, implementation) if shape.padded else []) + (
            [f"mode=decode: {self.name}/{impl} has no decode step"] if shape.decode and not implementation.decode else [])
        if why:
            return why
        resolved = self.resolve(shape.key_len, params or {})
        return implementation.reasons(dataclasses.replace(shape, params=tuple(sorted(resolved.items()))))

    def supported(self, impl: str, **problem: Any) -> bool:
        return not self.reasons(impl, **problem)

    def _impl(self, impl: str) -> Impl:
        if impl not in self.impls:
            raise ValueError(f"{self.name}: unknown impl {impl!r} (available: {', '.join(self.impls)})")
        return self.impls[impl]

    # ----------------------------------------------------------------- computing
    def prepare(self, q, k, v, *, impl: str, causal: bool = False, lengths=None, **params: Any) -> Prepared:
        """Validate, do every setup step, and return the zero-argument closure to time. `lengths`: a
        padded batch, sequence b valid up to lengths[b] (its output rows past that are zero)."""
        from variants import padding
        from variants._checks import check_inputs

        implementation = self._impl(impl)
        check_inputs(self, q, k, v, causal)
        if lengths is not None:
            padding.check_lengths(lengths, q, k)
        resolved = self.resolve(k.shape[-2], params)
        n_q, n_k = q.shape[-2], k.shape[-2]
        step = self.decode and n_q == 1 < n_k  # a decode step: the last position's query, as mode=decode runs it
        problem = Problem(
            device=q.device.type, dtype=q.dtype, batch=q.shape[0], num_heads=q.shape[1], num_kv_heads=k.shape[1],
            seq_len=n_k if step else n_q, kv_len=None if step or n_k == n_q else n_k, head_dim=q.shape[-1],
            causal=causal, params=tuple(sorted(resolved.items())), padded=lengths is not None, decode=step,
        )
        why = (cross_reasons(self, problem) if problem.cross else []) + (
            padding_reasons(self, implementation) if problem.padded else [])
        why = why or implementation.reasons(problem)
        if why:
            raise RuntimeError(f"{self.name}/{impl} cannot run here: {'; '.join(why)}")
        return padding.prepare(implementation, q, k, v, causal=causal, params=resolved, lengths=lengths)

    def attention(self, q, k, v, *, impl: str, causal: bool = False, lengths=None, **params: Any) -> torch.Tensor:
        """Attention output (B, H, n_q, d) for q (B, H, n_q, d) and k, v (B, H_kv, n_k, d)."""
        return self.prepare(q, k, v, impl=impl, causal=causal, lengths=lengths, **params)()

    # ----------------------------------------------------------------- patterns and theory
    def mask_mod(self, seq_len: int, *, causal: bool = False, **params: Any) -> Callable:
        """The allowed-pair predicate (b, h, q_idx, kv_idx) -> bool, as FlexAttention takes it."""
        if self.mask_fn is None:
            raise ValueError(f"{self.name} is not a score-based pattern: it has no mask")
        resolved = self.resolve(seq_len, params)
        return self.mask_fn(seq_len, causal, resolved)

    def mask(self, seq_len: int, *, causal: bool = False, device: str = "cpu", **params: Any) -> torch.Tensor:
        """The dense boolean (n, n) pattern, for checks and pictures at small n."""
        from variants.masks import dense_mask

        _check_seq_len(seq_len)
        return dense_mask(self.mask_mod(seq_len, causal=causal, **params), seq_len, device=device)

    def row_counts(self, seq_len: int, *, causal: bool = False, **params: Any) -> torch.Tensor:
        """Allowed keys per query row, from the pattern's formula (never from the mask)."""
        if self.row_counts_fn is None:
            raise ValueError(f"{self.name} has no pair count: it is not a score-based pattern")
        _check_seq_len(seq_len)
        return self.row_counts_fn(seq_len, causal, self.resolve(seq_len, params))

    def theory(
        self,
        *,
        seq_len: int,
        batch: int = 1,
        num_heads: int = 8,
        num_kv_heads: int | None = None,
        head_dim: int = 64,
        causal: bool = False,
        dtype_bytes: int = 4,
        mode: str = "fwd",
        kv_len: int | None = None,
        lengths: tuple[int, ...] | None = None,
        **params: Any,
    ) -> Theory:
        """Pairs, FLOPs and the claimed exponents for one shape and mode, per docs/CLAIMS.md; with
        `kv_len`, seq_len queries attend kv_len keys of another sequence (cross attention); with
        `lengths`, a padded batch: the sum over its sequences at their valid lengths."""
        _check_seq_len(seq_len)
        cross = {}
        if kv_len is not None and kv_len != seq_len:
            _check_seq_len(kv_len, "kv_len")
            why = cross_reasons(self, Problem(seq_len=seq_len, kv_len=kv_len, causal=causal))
            if why or mode == "decode":
                raise ValueError(why[0] if why else f"kv_len={kv_len} with mode=decode (allowed: fwd, fwd_bwd; "
                                 "decode is one query against seq_len keys)")
            cross = {"kv_len": kv_len}
        for field_name, value in (("batch", batch), ("num_heads", num_heads), ("head_dim", head_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field_name}={value!r} must be a positive int")
        resolved = self.resolve(seq_len, params)
        kv = kv_heads_for(self, num_heads, num_kv_heads, resolved)
        forward = self.theory_fn(
            seq_len=seq_len, batch=batch, num_heads=num_heads, num_kv_heads=kv, head_dim=head_dim,
            causal=causal, dtype_bytes=dtype_bytes, params=resolved, explicit=self.explicit(params),
            spec=self, **cross,
        )
        if mode == "decode":
            return self._decode(forward, seq_len=seq_len, batch=batch, num_heads=num_heads, num_kv_heads=kv,
                                head_dim=head_dim, dtype_bytes=dtype_bytes, params=resolved, explicit=self.explicit(params))
        if lengths is not None:
            from variants import padding

            padding.check_theory(self, lengths, batch, seq_len, cross=bool(cross), mode=mode)
            forward = padding.summed(forward, [self.theory_fn(
                seq_len=n, batch=1, num_heads=num_heads, num_kv_heads=kv, head_dim=head_dim, causal=causal,
                dtype_bytes=dtype_bytes, params=resolved, explicit=self.explicit(params), spec=self) for n in lengths])
        return for_mode(forward, mode, batch=batch, num_heads=num_heads, seq_len=seq_len, head_dim=head_dim)


    def _decode(self, forward: Theory, *, seq_len: int, params: dict, **shape) -> Theory:
        if not self.decode:
            raise ValueError(f"mode=decode: {self.name} has no decode step here (allowed: fwd, fwd_bwd)")
        last = None if self.row_counts_fn is None else int(self.row_counts_fn(seq_len, False, params)[-1])
        step = None if last is not None else self.theory_fn(seq_len=1, causal=False, params=params, spec=self, **shape)
        return decode_step(forward, last_row=last, step=step, batch=shape["batch"], num_heads=shape["num_heads"],
                           head_dim=shape["head_dim"], num_kv_heads=shape["num_kv_heads"],
                           dtype_bytes=shape["dtype_bytes"], index_entries=self.index_fn(params) if self.index_fn else 0)


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


def _check_seq_len(seq_len: int, name: str = "seq_len") -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise ValueError(f"{name}={seq_len!r} must be a positive int")


_REGISTRY: dict[str, VariantSpec] = {}


def register(spec: VariantSpec) -> VariantSpec:
    """Add a variant; a second variant with the same name is an error, not an override."""
    if spec.name in _REGISTRY:
        raise ValueError(f"variant {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def attach(name: str, impl: Impl) -> None:
    """Add `impl` to variant `name` at import, before any lookup (variants.kernel_paths); no override."""
    if get(name).impls.setdefault(impl.name, impl) is not impl:
        raise ValueError(f"{name}: impl {impl.name!r} is already declared")


def names() -> list[str]:
    """Registered variant names, in registration order."""
    return list(_REGISTRY)


def get(name: str) -> VariantSpec:
    """The spec of `name`; an unknown name raises ValueError listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(_REGISTRY)})") from None
