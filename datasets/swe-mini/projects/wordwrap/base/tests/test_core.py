from wordwrap import fill, wrap


def test_empty_text_has_no_lines():
    assert wrap("", 10) == []


def test_short_text_stays_on_one_line():
    assert wrap("hello world", 40) == ["hello world"]


def test_long_words_get_their_own_line():
    assert wrap("a supercalifragilistic b", 5) == ["a", "supercalifragilistic", "b"]


def test_bad_width_is_rejected():
    try:
        wrap("x", 0)
    except ValueError:
        return
    raise AssertionError("width 0 was accepted")
