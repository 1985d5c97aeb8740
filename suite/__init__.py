"""The benchmark and complexity-analysis suite built on the `variants` registry."""
