"""Versions are ``MAJOR.MINOR.PATCH`` with non-negative integer parts."""


def parse(version):
    """The three parts of ``version`` as integers."""
    parts = version.strip().lstrip("v").split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a MAJOR.MINOR.PATCH version: {version!r}")
    return tuple(int(p) for p in parts)


def compare(a, b):
    """-1, 0 or 1 as version ``a`` is lower than, equal to or higher than ``b``."""
    pa, pb = parse(a), parse(b)
    if pa < pb:
        return -1
    if pa > pb:
        return 1
    return 0


def latest(versions):
    """The highest of ``versions``."""
    best = None
    for v in versions:
        if best is None or compare(v, best) > 0:
            best = v
    if best is None:
        raise ValueError("no versions given")
    return best
