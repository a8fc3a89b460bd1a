from semver import compare, latest, parse


def test_parts_are_numbers():
    assert parse("1.10.0") == (1, 10, 0)


def test_multi_digit_parts_compare_numerically():
    assert compare("1.10.0", "1.9.0") == 1
    assert latest(["1.9.0", "1.10.0", "1.2.0"]) == "1.10.0"
