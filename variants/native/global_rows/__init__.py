"""Global tokens: rows that see every key, and every row's view of the global keys."""

from variants.native.global_rows.rows import GlobalRows, OwnKey, full_rows

__all__ = ["GlobalRows", "OwnKey", "full_rows"]
