"""Greedy line breaking: words are packed onto a line while they fit."""


def wrap(text, width):
    """Split ``text`` into lines of at most ``width`` characters.

    Words longer than ``width`` are put on a line of their own.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) < width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    """``wrap`` joined with newlines."""
    return "\n".join(wrap(text, width))
