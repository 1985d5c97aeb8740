"""The benchmark and complexity-analysis suite built on the `variants` registry."""

__version__ = "0.2.0"  # CHANGELOG.md has an entry for each version
