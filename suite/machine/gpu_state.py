"""What a GPU did over a window of time, read through NVML (nvidia-ml-py, optional): its SM clock, power
draw, temperature, the energy it used, and the reasons its clock was held down.

A Sampler reads the energy counter at the window's ends and the rest on a background thread every
INTERVAL_S, and summarises the window as a GpuState. Nothing here raises: without the library, without a
GPU, or where NVML fails, `open_gpu` answers None, and a reading that fails is left out. The NVML
module is a parameter, so a test scripts the clocks with a fake one.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import threading
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

INTERVAL_S = 0.01
DIP = 0.9  # a window whose lowest clock is under this share of its median is unsteady
# NVML's clock-event (formerly throttle) reasons that slow the clock; idle, application-clock and
# display settings, sync boost are not a slowdown of the work timed. Bits as in nvml.h.
SLOWING = {0x8: "hw_slowdown", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x20: "sw_thermal", 0x4: "sw_power_cap"}
IDLE = 0x1  # nvmlClocksEventReasonGpuIdle: a sample taken while nothing ran says nothing of the clock
CLOCK_SM, TEMPERATURE_GPU = 1, 0  # NVML_CLOCK_SM, NVML_TEMPERATURE_GPU


@dataclass(frozen=True)
class GpuState:
    """A window's summary; None where NVML gave no reading of that kind."""

    sm_clock_mhz: float | None = None  # median of the samples taken while the GPU was not idle
    sm_clock_min_mhz: float | None = None
    power_w: float | None = None  # mean
    temp_c: float | None = None  # highest
    energy_j: float | None = None  # the energy counter's difference over the window
    throttle: tuple[str, ...] = ()  # slowing reasons seen in any sample (SLOWING's names)
    samples: int = 0

    @property
    def read(self) -> bool:
        """Whether NVML said anything at all about the window."""
        return any(v is not None for v in (self.sm_clock_mhz, self.power_w, self.temp_c, self.energy_j))

    @property
    def unsteady(self) -> bool:
        """The clock dipped more than 10% below its median, or a slowing reason held it down."""
        dipped = self.sm_clock_mhz is not None and self.sm_clock_min_mhz < DIP * self.sm_clock_mhz
        return dipped or bool(self.throttle)

    def steadiness(self) -> tuple[bool, float]:
        """Larger is steadier: not unsteady first, then the lowest clock's share of the median."""
        share = self.sm_clock_min_mhz / self.sm_clock_mhz if self.sm_clock_mhz else 1.0
        return not self.unsteady, share


class Reading(NamedTuple):
    clock_mhz: float | None
    power_mw: float | None
    temp_c: float | None
    reasons: int | None


class Window:
    """What `Sampler.window` yields: its `state` is set when the window closes."""

    state: GpuState = GpuState()


class Sampler:
    """One GPU's readings between a window's ends, every `interval_s` on a background thread."""

    def __init__(self, nvml: Any, handle: Any, interval_s: float = INTERVAL_S):
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        # NB: renamed in NVML 12.2 (r535); nvidia-ml-py keeps the old name beside the new
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """Sample while the body runs; the yielded Window's `state` summarises it afterwards."""
        box, readings, stop = Window(), [self._read()], threading.Event()
        before = self._call(self.nvml.nvmlDeviceGetTotalEnergyConsumption)  # mJ since the driver loaded
        thread = threading.Thread(target=self._loop, args=(readings, stop), daemon=True)
        thread.start()
        try:
            yield box
        finally:
            stop.set()
            thread.join()
            readings.append(self._read())  # NB: a window shorter than the interval still has two samples
            after = self._call(self.nvml.nvmlDeviceGetTotalEnergyConsumption)
            used = None if before is None or after is None or after < before else (after - before) / 1e3
            box.state = summarise(readings, used)

    def _loop(self, readings: list[Reading], stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            readings.append(self._read())

    def _read(self) -> Reading:
        return Reading(
            self._call(self.nvml.nvmlDeviceGetClockInfo, CLOCK_SM),
            self._call(self.nvml.nvmlDeviceGetPowerUsage),
            self._call(self.nvml.nvmlDeviceGetTemperature, TEMPERATURE_GPU),
            self._call(self._reasons) if self._reasons else None,
        )

    def _call(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except Exception:  # noqa: BLE001 - NVMLError (not supported, lost GPU...): no reading
            return None


def summarise(readings: list[Reading], energy_j: float | None) -> GpuState:
    """A window's GpuState from its readings; clocks of samples taken while the GPU was idle left out."""
    clocks = [float(r.clock_mhz) for r in readings if r.clock_mhz is not None and not (r.reasons or 0) & IDLE]
    power = [r.power_mw / 1e3 for r in readings if r.power_mw is not None]
    temps = [float(r.temp_c) for r in readings if r.temp_c is not None]
    seen = 0
    for r in readings:
        seen |= r.reasons or 0
    return GpuState(
        sm_clock_mhz=statistics.median(clocks) if clocks else None,
        sm_clock_min_mhz=min(clocks) if clocks else None,
        power_w=statistics.fmean(power) if power else None,
        temp_c=max(temps) if temps else None,
        energy_j=energy_j,
        throttle=tuple(name for bit, name in SLOWING.items() if seen & bit),
        samples=len(readings),
    )


def open_gpu(uuid: str | None = None, index: int = 0, nvml: Any = None) -> Sampler | None:
    """A sampler of the GPU with this UUID (else at this NVML index); None without nvidia-ml-py, without
    the driver's NVML, or where NVML cannot find the GPU."""
    try:
        nvml = nvml or importlib.import_module("pynvml")
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, NVMLError_NotFound...
        return None
    return Sampler(nvml, handle)


_THIS: dict[str, Sampler | None] = {}


def this_gpu() -> Sampler | None:
    """The sampler of the GPU torch uses in this process, opened once; None where there is none.

    NB: found by UUID, so CUDA_VISIBLE_DEVICES's renumbering does not matter; by index where torch
    has no UUID for it."""
    if "gpu" not in _THIS:
        _THIS["gpu"] = None
        try:
            import torch

            device = torch.cuda.current_device()
            uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
            _THIS["gpu"] = (uuid is not None and open_gpu(f"GPU-{uuid}")) or open_gpu(index=device)
        except Exception:  # noqa: BLE001 - no CUDA here: nothing to sample
            pass
    return _THIS["gpu"]
