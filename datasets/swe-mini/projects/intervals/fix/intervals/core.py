"""Merging of closed intervals ``(start, end)`` with ``start <= end``."""


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted by start."""
    merged = []
    for start, end in sorted(intervals):
        if start > end:
            raise ValueError(f"bad interval ({start}, {end})")
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered(intervals):
    """Total length covered by the intervals."""
    return sum(end - start for start, end in merge(intervals))
