"""Greedy word wrapping for plain text."""

from .core import fill, wrap

__all__ = ["fill", "wrap"]
