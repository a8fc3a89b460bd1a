from csvline import join, split


def test_plain_fields():
    assert split("a,b,c") == ["a", "b", "c"]


def test_quoted_separator():
    assert split('"a,b",c') == ["a,b", "c"]


def test_empty_fields():
    assert split(",,") == ["", "", ""]


def test_join_quotes_what_needs_it():
    assert join(["a,b", "c"]) == '"a,b",c'


def test_unterminated_quote_is_rejected():
    try:
        split('"abc')
    except ValueError:
        return
    raise AssertionError("an unterminated quote was accepted")
