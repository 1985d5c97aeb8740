"""A fake NVML (the `pynvml` module of nvidia-ml-py) with scripted readings, for the GPU-state tests
(suite.machine.gpu_state, suite.run.measurement.gpu_load): no GPU needed."""

from __future__ import annotations


class FakeNvml:
    """NVML's calls the sampler makes, answering from scripts (the last value repeats); `fail` names the
    calls that raise, as NVML's NVMLError does for a reading the GPU does not support."""

    def __init__(
        self,
        clocks=(1980,),
        reasons=(0,),
        power_mw=(300_000,),
        temps=(60,),
        energy_mj=(1000, 5000),
        fail=(),
        throttle_name="nvmlDeviceGetCurrentClocksEventReasons",
    ):
        self.scripts = {
            "clock": list(clocks),
            "reasons": list(reasons),
            "power": list(power_mw),
            "temp": list(temps),
            "energy": list(energy_mj),
        }
        self.fail, self.calls = set(fail), []
        setattr(self, throttle_name, lambda handle: self._next("reasons"))

    def _next(self, name):
        self.calls.append(name)
        if name in self.fail:
            raise RuntimeError(f"NVMLError: {name} not supported")
        script = self.scripts[name]
        return script.pop(0) if len(script) > 1 else script[0]

    def nvmlInit(self):
        if "init" in self.fail:
            raise RuntimeError("NVMLError_LibraryNotFound")

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if "uuid" in self.fail:
            raise RuntimeError("NVMLError_NotFound")
        return ("handle", uuid)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == 1  # NVML_CLOCK_SM
        return self._next("clock")

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._next("power")

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._next("temp")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._next("energy")
