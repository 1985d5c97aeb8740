"""`suite doctor`: what the suite would use on this machine, checked by doing it, and whether the
requested devices can be measured (exit 1 with the reason when one cannot)."""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import dataclass

import torch

from suite.machine import device as devices


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tried(name: str, fn) -> Check:
    """Run `fn` (which returns a detail string); an exception is the check's failure, with its text."""
    started = time.perf_counter()
    try:
        detail = fn()
        return Check(name, True, f"{detail} ({time.perf_counter() - started:.1f}s)")
    except Exception as err:  # noqa: BLE001 - every failure is a finding, reported as such
        return Check(
            name, False, f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}"
        )


def software() -> list[Check]:
    """Versions; an optional package that is missing is stated, not failed."""
    return [
        Check(
            "torch",
            True,
            f"{torch.__version__} (CUDA {torch.version.cuda or 'none'}, threads {torch.get_num_threads()})",
        ),
        Check("xformers", True, _version("xformers") or "not installed (optional: pip install -e '.[xformers]')"),
        Check("triton", True, _version("triton") or "not installed (optional: the do_bench cross-check on CUDA)"),
        Check("ray", True, _version("ray") or "not installed (optional: pip install -e '.[ray]')"),
        Check("allocator", True, _allocator()),
    ]


def _allocator() -> str:
    """What the default allocator setting, `auto`, makes the local workers run on."""
    from suite.machine import allocator

    library = allocator.jemalloc_library()
    if library is not None:
        return f"jemalloc ({library}), freed pages kept for reuse"
    return (
        "glibc, retain (optional: the system's jemalloc, Debian/Ubuntu `apt install libjemalloc2`, "
        "keeps the page faults of large temporaries out of the timings)"
    )


def _memory(device: str) -> str:
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        return f"{torch.cuda.get_device_name(0)}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
    import psutil

    mem = psutil.virtual_memory()
    return f"{psutil.cpu_count(logical=True)} CPUs, {mem.available / 2**30:.1f} of {mem.total / 2**30:.1f} GiB free"


def _sdpa_backends(device: str) -> str:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 128, 64, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
    found = []
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.MATH,
    ):
        try:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
            found.append(backend.name.lower())
        except RuntimeError:
            pass
    return "runs: " + ", ".join(found)


def _flex(device: str) -> str:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q = torch.randn(1, 2, 256, 64, device=device)
    mask = create_block_mask(lambda b, h, i, j: (i - j).abs() <= 32, None, None, 256, 256, device=device)
    torch.compile(flex_attention, dynamic=False)(q, q, q, block_mask=mask)
    return "compiled and ran a sliding-window block mask"


def _xformers_ops(device: str) -> str:
    import variants

    reasons = variants.get("full").reasons("xformers", device=device, dtype=torch.float16, seq_len=1024)
    if reasons:
        raise RuntimeError("; ".join(reasons))
    return "memory_efficient_attention has a forward op for float16"


def _do_bench(device: str) -> str:
    if device != "cuda":
        return "not used off CUDA (torch.utils.benchmark times the CPU)"
    from triton.testing import do_bench

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    ms = do_bench(lambda: a @ a)
    ours = devices.get("cuda").time(lambda: a @ a, 0.2, 50, 5)
    return f"4096² bf16 matmul: do_bench {ms:.3f} ms, suite {1e3 * sorted(ours)[len(ours) // 2]:.3f} ms"


def device_checks(device: str) -> list[Check]:
    why = devices.get(device, "--device").reasons()
    if why:
        return [Check(f"{device}", False, "; ".join(why))]
    return [
        Check(device, True, _memory(device)),
        _tried(f"{device} sdpa", lambda: _sdpa_backends(device)),
        _tried(f"{device} flex", lambda: _flex(device)),
        _tried(f"{device} xformers", lambda: _xformers_ops(device)),
        _tried(f"{device} do_bench", lambda: _do_bench(device)),
    ]


def doctor(requested: list[str]) -> tuple[list[Check], int]:
    """Every check, and the exit code: 1 when a requested device cannot be measured at all."""
    checks = software()
    code = 0
    for device in requested or list(devices.DEVICES):
        mine = device_checks(device)
        checks += mine
        if requested and not mine[0].ok:
            code = 1
    return checks, code
