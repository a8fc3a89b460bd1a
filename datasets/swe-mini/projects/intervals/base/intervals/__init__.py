"""Closed integer intervals: merging and total length."""

from .core import covered, merge

__all__ = ["covered", "merge"]
