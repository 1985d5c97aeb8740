"""The host's CPU caches, read from sysfs: what the bandwidth probe sizes its buffers by, and env.json records.

Each data or unified cache of cpu0 (`/sys/devices/system/cpu/cpu0/cache/index*`) by level: "L1d",
"L2", "L3", in bytes, with how many CPUs share it. Empty where sysfs does not say (not Linux).
"""

from __future__ import annotations

from pathlib import Path

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text: str) -> int:
    """sysfs's size ("32K", "1024K", "32768K") in bytes."""
    text = text.strip()
    return int(text[:-1]) * UNITS[text[-1]] if text and text[-1] in UNITS else int(text)


def shared_cpus(text: str) -> int:
    """How many CPUs a `shared_cpu_list` ("0-1", "0,2,4-7") names."""
    count = 0
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1 if part else 0
    return count


def caches(root: Path | None = None) -> dict[str, dict[str, int]]:
    """{"L1d": {"bytes": 32768, "shared_by": 1}, "L2": ..., "L3": ...} for cpu0's data caches."""
    out = {}
    for index in sorted((root or SYSFS).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            name = f"L{(index / 'level').read_text().strip()}" + ("d" if kind == "Data" else "")
            out[name] = {
                "bytes": size_bytes((index / "size").read_text()),
                "shared_by": shared_cpus((index / "shared_cpu_list").read_text()),
            }
        except (OSError, ValueError, KeyError):
            continue
    return out


def last_level(found: dict[str, dict[str, int]]) -> int | None:
    """The largest cache's size in bytes (the last level), None where none is known."""
    return max((c["bytes"] for c in found.values()), default=None)
