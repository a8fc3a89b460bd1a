from romans import from_roman, to_roman


def test_subtractive_numerals_parse():
    assert from_roman("IV") == 4
    assert from_roman("MCMXCIV") == 1994


def test_round_trip():
    for n in range(1, 400):
        assert from_roman(to_roman(n)) == n
