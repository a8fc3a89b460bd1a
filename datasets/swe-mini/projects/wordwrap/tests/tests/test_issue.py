from wordwrap import fill, wrap


def test_word_that_exactly_fills_the_line():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_fill_uses_the_whole_width():
    assert fill("one two three four", 9) == "one two\nthree\nfour"
