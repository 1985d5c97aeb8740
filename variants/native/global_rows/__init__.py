"""Global tokens: rows that see every key, and every row's view of the global keys."""

from variants.native.global_rows.global_keys import GlobalKeys
from variants.native.global_rows.rows import GlobalRows, full_rows

__all__ = ["GlobalKeys", "GlobalRows", "full_rows"]
