"""Measuring one case: its inputs, the correctness check, the FLOP count, the host's load while timing,
and `measure`, which makes the Row."""
