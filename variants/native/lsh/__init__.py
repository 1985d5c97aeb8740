"""LSH attention (Reformer): hashing, rounds of sorted chunks, their backward, and a plain reference."""

from variants.native.lsh.naive import reference
from variants.native.lsh.rounds import native, readable

__all__ = ["native", "readable", "reference"]
