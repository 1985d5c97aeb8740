"""variants.triton.compile_check: every launch of the `triton` paths compiled for sm_90 without a GPU
(Triton's compiler and the ptxas its wheel carries), and a kernel the interpreter runs but the compiler
refuses is named with the compiler's reason. The compiles run in child processes without the
interpreter (tests/conftest.py sets it for this one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
    import triton
    import triton.language as tl

    PLAIN = 1                   # a plain global: the interpreter reads it, the compiler refuses it
    NAMED = tl.constexpr(1)     # what the compiler reads

    @triton.jit
    def plain_kernel(X, n, KIND: tl.constexpr, B: tl.constexpr):
        i = tl.arange(0, B)
        x = tl.load(X + i, mask=i < n)
        if KIND == PLAIN:
            x = x * 2
        tl.store(X + i, x, mask=i < n)

    @triton.jit
    def named_kernel(X, n, KIND: tl.constexpr, B: tl.constexpr):
        i = tl.arange(0, B)
        x = tl.load(X + i, mask=i < n)
        if KIND == NAMED:
            x = x * 2
        tl.store(X + i, x, mask=i < n)
""")


def _without_interpreter() -> dict:
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def test_a_global_the_compiler_cannot_read_is_named_and_a_constexpr_one_compiles(tmp_path):
    (tmp_path / "toy_kernels.py").write_text(KERNELS)
    launch = {
        "module": "toy_kernels",
        "args": {"X": {"tensor": "float32"}, "n": {"value": 100}, "KIND": {"value": 1}, "B": {"value": 128}},
        "options": {"num_warps": 4},
    }
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from variants.triton.compile_check import compile_one
        kernels = ("plain_kernel", "named_kernel")
        print(json.dumps([compile_one(dict({json.dumps(launch)}, kernel=k), 90) for k in kernels]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], env=_without_interpreter(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plain, named = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain is not None and "plain_kernel sm_90" in plain and "PLAIN" in plain, plain
    assert named is None, named


@pytest.mark.slow
def test_every_launch_of_the_triton_paths_compiles_for_sm_90():
    """bf16 at d = 64 (what a GPU times; the module's own command adds float16, float32 and d = 128),
    forward and backward, causal and not, every variant with a `triton` path: a kernel the GPU's compiler refuses
    (a plain global in a kernel) fails here."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "variants.triton.compile_check",
            "--arch",
            "90",
            "--dtypes",
            "bfloat16",
            "--head-dims",
            "64",
        ],
        env=_without_interpreter(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    summary = [line for line in done.stdout.splitlines() if "distinct launches" in line]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    launches = int(summary[0].split()[0])
    assert launches >= 100 and summary[0].endswith(": 0 failed"), summary


def test_a_launch_over_the_blocks_shared_memory_runs_with_fewer_stages_and_remembers_them():
    """variants.triton.tiles.launch: Triton refuses a kernel whose shared memory is over the block's at
    load (OutOfResources); the launch tries fewer stages, and the next launch of the same shape goes
    straight to the stages that fit. A launch that fits is made once, as asked."""
    import torch
    from triton.runtime.errors import OutOfResources

    from variants.triton import tiles

    class Kernel:
        def __init__(self, fits: int):
            self.fits, self.tried = fits, []

        def __getitem__(self, grid):
            def run(*args, num_stages, **kwargs):
                self.tried.append(num_stages)
                if num_stages > self.fits:
                    raise OutOfResources(1000 * num_stages, 1000 * self.fits, "shared memory")

            return run

    x = torch.zeros(4)
    big = Kernel(fits=1)
    tiles.launch(big, (1,), x, 4, BM=64, num_warps=8)
    assert big.tried == [3, 2, 1]
    tiles.launch(big, (1,), x, 4, BM=64, num_warps=8)
    assert big.tried == [3, 2, 1, 1]  # remembered
    tiles.launch(big, (1,), x, 4, BM=32, num_warps=8, num_stages=2)  # another shape: tried afresh
    assert big.tried == [3, 2, 1, 1, 2, 1]
    small = Kernel(fits=3)
    tiles.launch(small, (1,), x, 4, BM=64)
    assert small.tried == [3] and small not in tiles._SHRUNK
    never = Kernel(fits=0)
    with pytest.raises(OutOfResources):
        tiles.launch(never, (1,), x, 4, BM=64)
