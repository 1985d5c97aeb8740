"""Elementwise steps compiled into one pass by inductor (torch.compile), the eager form beside them.

Eager torch runs an elementwise chain one operator at a time, a pass over memory each, and some of its transcendental
kernels are slow on the CPU, where inductor's one kernel for sin and cos together is several times faster and about as
exact (docs/performance.md, "(12) Where a call's time goes, and two feature maps compiled"). So a feature map's
elementwise chain may be a `Fused` step: the eager function, compiled with dynamic shapes in setup. A compiled call
costs more than an eager one (dynamo's guards, inductor's wrapper), so a step names the least elements its compiled
form is for, where the two broke even (elu+1 at 2^17 elements, sin and cos at 2^13). A named step records, call by
call, which form ran on how many
elements (variants.rules.paths.share): the row's path names the form that took most of them, so linear's
map reads eager where all its chunks are under 2^17 elements (n ≤ 1448 at H = 8, d = 64) and compiled past.

Compiling is setup, never the timed call: `warm(*examples)` compiles for the examples before the
call that is timed, and `__call__` takes the compiled form only for arguments like an example that
warmed without error (`_key`); anything else, or a call whose graph would compile, runs the eager
form, so nothing compiles inside a timed call. A step is only for where autograd does not record:
it runs under no_grad (grad mode is a guard of every graph, and a forward runs with it on where
fwd_bwd's steps run with it off). Where inductor cannot compile here (no C++ compiler, a device it
lacks, `ATTN_EAGER=1` in the environment), the eager form runs and `note` says why; a failed
compile is not tried again in the process.
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import torch

from variants.rules.paths import share

COMPILED_DEVICES = ("cpu", "cuda")  # not meta: the FLOP counter's tensors would take graphs of their own
EAGER_ENV = "ATTN_EAGER"  # set to 1: every Fused step runs its eager form (a check, or a machine without a compiler)


@functools.cache
def sweep_dynamo():
    """torch._dynamo, set once per process for a sweep, imported on the first compile (its import is a
    large part of the start of every process that imports the variants, where most never compile). Past
    dynamo's recompile limit (8) a compiled function silently runs unfused and eager, which a benchmark would then time
    as the compiled path: the limit is raised, and hitting it becomes an error rather than a quiet
    fallback. FlexAttention's compile (variants.impls) and every Fused step share this."""
    import torch._dynamo
    import torch._dynamo.config as config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 4096))
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True
    return torch._dynamo


@functools.cache
def _no_recompile():
    """A call's guard (microseconds a call): raise rather than compile; and the errors that say it would."""
    dynamo = sweep_dynamo()
    return (
        dynamo.config.patch(error_on_recompile=True),
        (dynamo.exc.RecompileError, dynamo.exc.FailOnRecompileLimitHit),
    )


class Fused:
    """`eager`, and the compiled form of `traced` (the same values, out of place: what inductor fuses
    best) for the kinds of arguments `warm` compiled. One per function, at module level. Past
    dynamo's graph limit a compile fails (`sweep_dynamo`) and the eager form runs."""

    def __init__(
        self,
        eager: Callable[..., torch.Tensor],
        traced: Callable[..., torch.Tensor] | None = None,
        min_elements: int = 0,
        name: str | None = None,
    ):
        self.eager, self.traced = eager, traced or eager  # traced: the same values, written for the compiler
        self.name = name  # the path's name (variants.rules.paths.share): "<name> compiled" or "<name> eager"
        self.min_elements = min_elements  # smaller calls run eager: a compiled call costs more
        self._compiled = None
        self._ready: set[tuple] = set()
        self.note = "eager (not warmed)"
        self.compiled_calls = 0  # for the tests: that the sweep's shapes reach the compiled form
        self._failed: str | None = None  # why a compile failed: not tried again

    def warm(self, *examples: tuple, most: int | None = None) -> str:
        """Compile for each example's arguments (tensors of the call's dtype and device); returns the
        note: how the step will run for them. float64, the dtype the checks' references compute in,
        and meta tensors (the FLOP counter's) stay eager and take none of the function's few graphs.
        `most`: the most elements a call will have; under `min_elements` every call runs eager, so
        nothing is compiled (a compile is seconds of each worker process's setup)."""
        if os.environ.get(EAGER_ENV) == "1":
            self.note = f"eager ({EAGER_ENV}=1)"
            return self.note
        if most is not None and most < self.min_elements:
            self.note = f"eager (calls of {most} elements at most, under the {self.min_elements} it is compiled for)"
            return self.note
        if self._failed:
            self.note = self._failed
            return self.note
        examples = [args for args in examples if _key(args) not in self._ready]
        if any(_first(args).dtype == torch.float64 for args in examples):
            self.note = "eager (float64)"
            return self.note
        if any(_first(args).device.type not in COMPILED_DEVICES for args in examples):
            self.note = f"eager ({_first(examples[0]).device.type})"  # meta: FlopCounterMode's tensors
            return self.note
        try:
            self._compiled = self._compiled or torch.compile(self.traced, dynamic=True)
            sweep_dynamo()
            for args in examples:
                with torch.no_grad():
                    self._compiled(*_detached(args))
                self._ready.add(_key(args))
        except Exception as err:  # noqa: BLE001 — no compiler, an unsupported device, the graphs' limit
            first_line = str(err).splitlines()[0][:160] if str(err) else ""
            self.note = self._failed = f"eager (the compile failed: {type(err).__name__}: {first_line})"
            return self.note
        least = f" for calls of {self.min_elements} elements or more" if self.min_elements else ""
        self.note = f"compiled{least} (inductor, dynamic shapes)"
        return self.note

    def __call__(self, *args):
        key, elements = _key(args), _first(args).numel()
        if key in self._ready and elements >= self.min_elements:
            no_recompile, errors = _no_recompile()
            try:  # NB: no_grad and detached: one graph for both modes (grad mode is a guard)
                with torch.no_grad(), no_recompile:
                    out = self._compiled(*_detached(args))
                self.compiled_calls += 1
                self._named("compiled", elements)
                return out
            except errors:
                self._ready.discard(key)  # a guard `_key` does not see: eager from here on
                self.note += f"; eager for {key} (its graph would have compiled in the call)"
        self._named("eager", elements)
        return self.eager(*args)

    def _named(self, form: str, elements: int) -> None:
        if self.name:
            share(self.name, form, elements)


def _detached(args: tuple) -> tuple:
    """The arguments with no autograd history (requires_grad is a guard too): a step runs only
    where autograd does not record."""
    return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)


def _first(args: tuple) -> torch.Tensor:
    return next(a for a in args if isinstance(a, torch.Tensor))


def _key(args: tuple) -> tuple:
    """What a compiled graph is specialized on: each tensor's dtype, device, which of its sizes are
    0, 1 or more (dynamo specializes 0 and 1) and whether it is contiguous (inductor guards on it:
    a chunk of rows is a view, a whole q is not); every other argument's value (a Python number is
    a constant of the graph). A guard beyond these raises in the call (`_no_recompile`), and the eager
    form runs instead."""
    return tuple(
        (a.dtype, a.device.type, tuple(min(size, 2) for size in a.shape), a.is_contiguous())
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    )
