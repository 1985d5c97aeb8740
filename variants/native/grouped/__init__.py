"""Grouped key/value heads (MQA, GQA) without a repeated copy of K and V."""

from variants.native.grouped.heads import grouped

__all__ = ["grouped"]
