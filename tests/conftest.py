"""Test setup: the Triton interpreter where there is no GPU. Shared helpers are in tests/helpers.py."""

from __future__ import annotations

import os

import torch

# The `triton` paths run under Triton's interpreter on a machine without a GPU (variants.triton): set
# before anything imports triton. With a GPU they run compiled, as they are timed.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
