"""What several stages share about the machine: the device table (timer, peak memory, synchronize, limits),
the timers, the GEMM and bandwidth probes, the caches and the allocator setting, the GPU's state (NVML)
and the compile caches' folder. Imports no stage."""
