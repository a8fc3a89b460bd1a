"""A small least-recently-used cache."""

from .core import LRUCache

__all__ = ["LRUCache"]
