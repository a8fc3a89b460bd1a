"""Conversion between integers (1 to 3999) and Roman numerals."""

VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}

PAIRS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]


def to_roman(number):
    """Formats ``number`` (1 to 3999)."""
    if not 0 < number < 4000:
        raise ValueError("number must be between 1 and 3999")
    out = []
    for value, letters in PAIRS:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)


def from_roman(text):
    """Parses a numeral such as ``"MCMXCIV"``."""
    text = text.strip().upper()
    if not text or any(c not in VALUES for c in text):
        raise ValueError(f"not a Roman numeral: {text!r}")
    total = 0
    previous = 0
    for c in text:
        value = VALUES[c]
        if value > previous:
            # `previous` was already added once: take it back and subtract it.
            total += value - 2 * previous
        else:
            total += value
        previous = value
    return total
