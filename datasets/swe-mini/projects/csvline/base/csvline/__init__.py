"""Splitting and joining single CSV records."""

from .core import join, split

__all__ = ["join", "split"]
