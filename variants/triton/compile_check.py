"""Every launch of the `triton` paths compiled for a CUDA GPU, on a machine without one.

Triton's interpreter runs the kernels' Python on CPU tensors: it checks their arithmetic, not that
Triton's compiler accepts them (a global that is not a `tl.constexpr`, a construct the compiler's
front end rejects, a PTX that ptxas refuses all pass under it). This check closes that gap before a
lease: a child process runs every path (forward and backward, causal and not) under the interpreter
and records each kernel launch (its arguments' types, its constexprs, warps and stages); a second
child, without the interpreter, compiles each distinct launch with `triton.compile` for a CUDA
target down to a cubin (Triton's wheel carries ptxas). No GPU is touched.

    python -m variants.triton.compile_check [--arch 90,80] [--n 130] [--dtypes bfloat16,float16,float32]
                                            [--head-dims 64,128] [--jobs 2]

Each compiled launch's shared memory is held against a block's limit on the target (`SHARED_BYTES`),
with fewer stages where it is over, as `variants.triton.tiles.launch` retries on the device. Exit 1 names
each launch that did not compile or fit, with the compiler's message. Not checked here: speed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

TORCH_TYPES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64",
    "int32": "i32",
    "int64": "i64",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "i1",
}
OPTIONS = ("num_warps", "num_stages")
# the most shared memory a block may take (CUDA's opt-in limit): A100, the sm_86/89 cards, H100/H200
SHARED_BYTES = {80: 166912, 86: 101376, 89: 101376, 90: 232448}


def describe(value):
    """A launch argument as JSON: a tensor's dtype, or the value (a tl.dtype by name)."""
    import torch
    import triton.language as tl

    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, tl.dtype):
        return {"tl": value.name}
    if isinstance(value, tl.constexpr):
        return describe(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"a launch argument of type {type(value).__name__} is not described")


@contextmanager
def recording(launches: dict[str, dict]) -> Iterator[None]:
    """Record each interpreted launch (kernel, arguments by name, options), one entry per distinct one."""
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        named = dict(zip(self.arg_names, args)) | {k: v for k, v in kwargs.items() if k in self.arg_names}
        entry = {
            "module": self.fn.__module__,
            "kernel": self.fn.__name__,
            "args": {name: describe(value) for name, value in named.items()},
            "options": {k: kwargs[k] for k in OPTIONS if k in kwargs},
        }
        launches.setdefault(json.dumps(entry, sort_keys=True), entry)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield
    finally:
        InterpretedFunction.run = original


def capture(n: int, dtypes: list[str], head_dims: list[int]) -> list[dict]:
    """Run every `triton` path, forward and backward, causal and not, in each dtype and head size (the
    tiles follow d); return the distinct launches. Needs TRITON_INTERPRET=1 set before triton is imported."""
    import torch

    import variants
    from variants.rules import padding

    launches: dict[str, dict] = {}
    generator = torch.Generator().manual_seed(0)
    with recording(launches):
        for name in variants.names():
            spec = variants.get(name)
            if "triton" not in spec.impls:
                continue
            for dtype, d in ((dtype, d) for dtype in dtypes for d in head_dims):
                for causal in (False, True):  # NB: the structure's reasons only: the interpreter's bf16
                    if spec.reasons("triton", causal=causal, dtype=torch.float32, seq_len=n):  # products are
                        continue  # wrong (so its tests skip bf16), but a bf16 launch is recorded all the same
                    q, k, v = (
                        torch.randn(1, 2, n, d, generator=generator, dtype=getattr(torch, dtype)).requires_grad_()
                        for _ in range(3)
                    )
                    call = padding.prepare(
                        spec.impls["triton"], q, k, v, causal=causal, params=spec.resolve(n, {}), lengths=None
                    )  # past the dtype's reason (spec.attention would refuse)
                    call().sum().backward()
    return list(launches.values())


def signature(fn, launch: dict) -> tuple[dict, dict]:
    """(signature, constexprs) for triton.compile's ASTSource, as a launch's specialization makes them:
    pointers by element type, integers as i32 or i64 (1 is a constant unless do_not_specialize)."""
    sig, constants = {}, {}
    for param in fn.params:
        arg = launch["args"].get(param.name, {"value": None})
        if param.is_constexpr or arg.get("value", 0) is None:
            sig[param.name], constants[param.name] = "constexpr", value_of(arg)
        elif "tensor" in arg:
            sig[param.name] = "*" + TORCH_TYPES[arg["tensor"]]
        elif isinstance(arg["value"], bool):
            sig[param.name] = "i1"
        elif isinstance(arg["value"], int):
            if arg["value"] == 1 and not param.do_not_specialize:
                sig[param.name], constants[param.name] = "constexpr", 1
            else:
                sig[param.name] = "i32" if -(2**31) <= arg["value"] < 2**31 else "i64"
        else:
            sig[param.name] = "fp32"
    return sig, constants


def value_of(arg: dict):
    import triton.language as tl

    return tl.dtype(arg["tl"]) if "tl" in arg else arg.get("value")


def compile_one(launch: dict, arch: int) -> str | None:
    """Compile a launch for sm_<arch> down to a cubin: None, or what failed (the compiler's message names
    the line, its cause the reason). Over the block's shared memory, with fewer stages, as
    variants.triton.tiles.launch does on the device; a failure where even one stage is over."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from variants.triton.tiles import DEFAULT_STAGES

    fn = getattr(importlib.import_module(launch["module"]), launch["kernel"])
    sig, constants = signature(fn, launch)
    options = dict(launch["options"])
    try:
        while True:
            compiled = triton.compile(
                ASTSource(fn, sig, constants), target=GPUTarget("cuda", arch, 32), options=options
            )
            if not compiled.asm.get("cubin"):
                raise RuntimeError("no cubin")
            shared, limit = compiled.metadata.shared, SHARED_BYTES.get(arch, compiled.metadata.shared)
            if shared <= limit:
                break
            stages = options.get("num_stages", DEFAULT_STAGES)
            if stages <= 1:  # Triton refuses such a kernel when it loads (OutOfResources)
                raise RuntimeError(
                    f"needs {shared} bytes of shared memory at one stage; a block on sm_{arch} has {limit}"
                )
            options["num_stages"] = stages - 1
    except Exception as err:
        pointers = sorted({v for v in sig.values() if v.startswith("*")})
        return (
            f"{launch['kernel']} sm_{arch} {'/'.join(pointers)} {json.dumps(launch['options'])} "
            f"{ {k: v for k, v in constants.items() if k.isupper()} }: {type(err).__name__}: {err}"
            + (f"\n    {err.__cause__!r}" if err.__cause__ else "")
        )
    return None


def compile_all(launches: list[dict], arches: list[int], jobs: int) -> list[str]:
    """Every launch for every arch, `jobs` compiles at a time; the failures, one line each."""
    from concurrent.futures import ProcessPoolExecutor

    work = [(launch, arch) for arch in arches for launch in launches]
    with ProcessPoolExecutor(jobs) as pool:
        return [line for line in pool.map(compile_one, *zip(*work)) if line]


def child(mode: str, path: str, args: argparse.Namespace) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if mode == "capture":
        env["TRITON_INTERPRET"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "variants.triton.compile_check",
        f"--{mode}",
        path,
        "--arch",
        args.arch,
        "--n",
        str(args.n),
        "--dtypes",
        args.dtypes,
        "--head-dims",
        args.head_dims,
        "--jobs",
        str(args.jobs),
    ]
    code = subprocess.run(cmd, env=env).returncode
    if code:
        sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="90", help="compute capabilities, comma-separated (90: H100/H200, 80: A100)")
    parser.add_argument("--n", type=int, default=130, help="the length the paths are run at while recorded")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32", help="the paths' input dtypes, comma-separated")
    parser.add_argument("--head-dims", default="64,128", help="head sizes d, comma-separated (the tiles follow d)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiles at a time")
    parser.add_argument("--capture", metavar="JSON", help=argparse.SUPPRESS)  # the children's parts
    parser.add_argument("--compile", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.capture:
        with open(args.capture, "w") as fh:
            json.dump(capture(args.n, args.dtypes.split(","), [int(d) for d in args.head_dims.split(",")]), fh)
        return
    if args.compile:
        with open(args.compile) as fh:
            launches = json.load(fh)
        failures = compile_all(launches, [int(arch) for arch in args.arch.split(",")], args.jobs)
        print(
            f"{len(launches)} distinct launches, compiled for sm_{', sm_'.join(args.arch.split(','))}: "
            f"{len(failures)} failed"
        )
        print("\n".join(failures))
        sys.exit(1 if failures else 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "launches.json")
        child("capture", path, args)
        child("compile", path, args)


if __name__ == "__main__":
    main()
