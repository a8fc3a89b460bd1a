"""Parsing and ordering of semantic versions (MAJOR.MINOR.PATCH)."""

from .core import compare, latest, parse

__all__ = ["compare", "latest", "parse"]
