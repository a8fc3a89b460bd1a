from romans import from_roman, to_roman


def test_formatting():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3999) == "MMMCMXCIX"


def test_additive_numerals_parse():
    assert from_roman("MDCLXVI") == 1666
    assert from_roman("III") == 3


def test_garbage_is_rejected():
    try:
        from_roman("ABC")
    except ValueError:
        return
    raise AssertionError("ABC was accepted")
