"""The environment a run measured in: versions, device, CPU and its caches, threads, allocator, git commit."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from suite.machine import allocator
from suite.machine.caches import caches


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ROOT = Path(__file__).resolve().parents[2]  # the checkout that holds the packages
SOURCES = ("suite", "variants")  # the packages a run imports: a file git does not track there is code it runs


def _git_commit(root: Path = ROOT) -> str | None:
    """HEAD, with "-dirty" where a tracked file changed or a file git neither tracks nor ignores lies in
    the packages a run imports (a new module there changes what runs as much as an edited one)."""
    try:
        out = _git(root, "rev-parse", "HEAD")
        if out.returncode != 0:
            return None
        changed = _git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip()
        untracked = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *SOURCES).stdout.strip()
        return out.stdout.strip() + ("-dirty" if changed or untracked else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5)


def _xformers_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("xformers")
    except Exception:
        return None


def fingerprint(settings, devices: list[str]) -> dict:
    """Everything that makes two runs comparable or not; `fingerprint_id` hashes the stable part."""
    env = {
        "torch": torch.__version__,
        "xformers": _xformers_version(),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_caches": caches(),  # bytes per level (L1d, L2, L3) and the CPUs sharing each
        "threads": settings.threads,
        "allocator": allocator.resolve(settings.allocator),  # auto: which (suite.machine.allocator)
        "devices": devices,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "git_commit": _git_commit(),
    }
    stable = {
        k: env[k]
        for k in (
            "torch",
            "xformers",
            "cuda",
            "python",
            "cpu_model",
            "cpu_count",
            "threads",
            "allocator",
            "cuda_device",
        )
    }
    env["fingerprint_id"] = hashlib.sha1(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:12]
    return env
