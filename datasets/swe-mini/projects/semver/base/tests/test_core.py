from semver import compare, latest, parse


def test_parse_accepts_a_v_prefix():
    assert len(parse("v1.2.3")) == 3


def test_parse_rejects_two_parts():
    try:
        parse("1.2")
    except ValueError:
        return
    raise AssertionError("1.2 was accepted")


def test_single_digit_ordering():
    assert compare("1.2.3", "1.2.4") == -1
    assert compare("2.0.0", "1.9.9") == 1
    assert compare("1.0.0", "v1.0.0") == 0


def test_latest_of_single_digits():
    assert latest(["0.1.0", "0.3.0", "0.2.0"]) == "0.3.0"
