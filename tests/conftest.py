"""Test setup: the Triton interpreter where there is no GPU, and SIGHUP as a terminal leaves it. Shared helpers
are in tests/helpers.py."""

from __future__ import annotations

import os
import signal

import torch

# The `triton` paths run under Triton's interpreter on a machine without a GPU (variants.triton): set
# before anything imports triton. With a GPU they run compiled, as they are timed.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The signal tests hang up on the commands they start, which must find SIGHUP as a terminal leaves it: a
# test run under `nohup` would hand them an ignored SIGHUP, which a command keeps ignored (suite.signals).
if hasattr(signal, "SIGHUP"):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_collection_modifyitems(items):
    """A test module names in SLOW_FIXTURES the fixtures that run real sweeps in subprocesses: every test
    that uses one is slow (left out of the fast lane, `pytest -m "not slow"`), whatever else it checks."""
    import pytest

    for item in items:
        slow = getattr(getattr(item, "module", None), "SLOW_FIXTURES", ())
        if set(slow) & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
