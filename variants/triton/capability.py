"""Where the Triton kernels run: a CUDA device, or the CPU under Triton's interpreter
(TRITON_INTERPRET=1, set before Triton is first imported), which runs the same kernels on CPU
tensors, slowly and exactly. The reasons are data: `suite list`, result rows and test skips show them."""

from __future__ import annotations

import functools
import importlib.util
import sys

import torch

INSTALL = "pip install triton (a CUDA build of torch ships it)"
NO_INTERPRETER = (
    "device=cpu without TRITON_INTERPRET=1: Triton kernels need a GPU or Triton's interpreter "
    "(TRITON_INTERPRET=1, set before triton is imported)"
)
GPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # float64 only under the interpreter


@functools.cache
def import_error() -> str:
    """Why triton cannot be imported here ('' when it can)."""
    if importlib.util.find_spec("triton") is None:
        return f"triton not installed ({INSTALL})"
    try:
        import triton  # noqa: F401
    except Exception as err:  # noqa: BLE001 - a broken install is a reason, not a crash
        return f"triton not importable: {type(err).__name__}: {str(err)[:200]}"
    return ""


def interpreting() -> bool:
    """Whether Triton's interpreter is on: kernels defined from now run on CPU tensors."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def loaded_mode() -> bool | None:
    """Whether the kernels of this process were defined under the interpreter (None: none defined yet).
    NB: @triton.jit decides when a kernel module is imported; flipping the variable later changes nothing."""
    module = sys.modules.get("variants.triton.tiles")
    return None if module is None else module.INTERPRETED


def reasons(device: str, dtype: torch.dtype) -> list[str]:
    """Why the `triton` kernels cannot run on `device` in `dtype` here ([] when they can)."""
    why = import_error()
    if why:
        return [why]
    interpreted = interpreting() if loaded_mode() is None else loaded_mode()
    if device == "cpu" and not interpreted:
        return [
            NO_INTERPRETER
            if loaded_mode() is None
            else "device=cpu: the kernels were loaded without TRITON_INTERPRET=1 in this process"
        ]
    if device == "cuda" and interpreted:
        return [
            "device=cuda with TRITON_INTERPRET=1: the interpreter runs the kernels on the host; "
            "unset it to time them on the GPU"
        ]
    if device == "cpu" and dtype == torch.bfloat16:
        return [
            "dtype=bfloat16 under Triton's interpreter: its tl.dot multiplies bf16 operands wrongly (triton 3.9; "
            "float16, float32 and float64 are right): bf16 is checked on a GPU"
        ]
    if device == "cuda" and dtype not in GPU_DTYPES:
        return [
            f"dtype={str(dtype).removeprefix('torch.')} on cuda (supported: float16, bfloat16, float32; "
            "float64 only under the interpreter)"
        ]
    return []
