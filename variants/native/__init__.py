"""variants.native"""

__all__ = []
