"""Bands of keys: tiles of the band |i − j| ≤ w and contiguous key ranges per block of queries."""

from variants.native.band.ranges import KeyRanges, key_ranges
from variants.native.band.windows import BandPlan, band_bias, band_part, band_plan

__all__ = ["BandPlan", "KeyRanges", "band_bias", "band_part", "band_plan", "key_ranges"]
