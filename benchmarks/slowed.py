"""A test plugin for `suite ab`: an injected regression, one variant made slower on one side only.

    # benchmarks/ on PYTHONPATH:
    python -m suite ab --base-dir SIDE_A --new-dir SIDE_B --grid pr --device cuda --plugin slowed

Both sides load the plugin; only the side whose folder (the server's working directory) holds
`slowdown.py` is slowed:

    VARIANT = "strided"   # every implementation of it the grid times
    FACTOR = 1.10         # each call this much slower, as the suite's own timer measures it

Each prepared call gets a pause after it: on a GPU a `torch.cuda._sleep` kernel queued behind the call's
own, on the CPU a spin on the clock. Its length is calibrated per case with the suite's timer (the same
CUDA events, L2 flush and queued calls as a sweep): the call alone, then with the pause, the pause
rescaled until the pair's ratio is within 1% of FACTOR (a host-bound call's GPU idles, so its pause
must be longer than 10% of the call), once per case and process (a sweep prepares a case again for each
measurement). What the calibration reached is in the row's notes.
"""

from __future__ import annotations

import functools
import time

import torch

import variants
from suite.machine import timing
from variants.rules.spec import Prepared

TOLERANCE = 0.01
ROUNDS = 5
_CALIBRATED: dict[tuple, tuple[float, float]] = {}  # a case's key: (the pause in seconds, the ratio it reached)


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def _per_call(fn, device: str) -> float:
    """The suite's timer's median, short: what a sweep would read for `fn`."""
    if device == "cuda":
        return _median(timing.time_cuda(fn, min_run_time=0.05, max_samples=200, min_samples=10))
    fn()
    samples = []
    for _ in range(11):
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)
    return _median(samples)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@functools.cache
def _pause(device: str):
    """pause(seconds): a GPU sleep kernel of about that long, or a spin on the host."""
    if device != "cuda":
        return _spin
    cycles = 1 << 20
    rate = cycles / _per_call(lambda: torch.cuda._sleep(cycles), "cuda")  # the sleep kernel's cycles per second
    return lambda seconds: torch.cuda._sleep(max(1, int(seconds * rate)))


def calibrate(prepared: Prepared, factor: float, device: str, pause) -> tuple[float, float]:
    """The pause after each call that makes the suite's timer read `factor` × the call's time, and the ratio reached."""
    base = _per_call(prepared, device)
    seconds, ratio = (factor - 1) * base, 1.0
    for _ in range(ROUNDS):
        ratio = _per_call(lambda: (prepared(), pause(seconds))[0], device) / base
        if abs(ratio - factor) <= TOLERANCE * factor:
            break
        seconds *= min(max((factor - 1) / max(ratio - 1, 1e-3), 0.25), 4.0)
    return seconds, ratio


def slowed(prepared: Prepared, factor: float, device: str, key: tuple | None = None) -> Prepared:
    """`prepared` with a calibrated pause after each call (calibrated once per `key` in this process)."""
    pause = _pause(device)
    found = _CALIBRATED.get(key) if key is not None else None
    seconds, ratio = found or calibrate(prepared, factor, device, pause)
    if key is not None:
        _CALIBRATED[key] = (seconds, ratio)

    def call():
        out = prepared()
        pause(seconds)
        return out

    notes = {**prepared.notes, "slowed": f"× {factor} asked, × {ratio:.3f} calibrated (a {seconds * 1e6:.0f} µs pause)"}
    return Prepared(call, setup_s=prepared.setup_s, notes=notes)


def _wrap(variant: str, impl, factor: float):
    def prepare(q, k, v, **kwargs):
        key = (
            variant,
            impl.name,
            tuple(q.shape),
            tuple(k.shape),
            q.dtype,
            q.device.type,
            q.requires_grad,
            repr(sorted(kwargs.items())),
        )
        return slowed(impl.prepare(q, k, v, **kwargs), factor, q.device.type, key)

    return prepare


def install(variant: str, factor: float) -> None:
    """Slow every implementation of `variant` but its dense reference (the checks' yardstick)."""
    import dataclasses

    impls = variants.get(variant).impls
    for name, impl in list(impls.items()):
        if name != "dense":
            impls[name] = dataclasses.replace(impl, prepare=_wrap(variant, impl, factor))


try:
    import slowdown  # only in the slowed side's folder
except ImportError:
    slowdown = None
if slowdown is not None:
    install(slowdown.VARIANT, float(slowdown.FACTOR))
