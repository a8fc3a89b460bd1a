from csvline import join, split


def test_doubled_quotes_are_unescaped():
    assert split('"say ""hi""",x') == ['say "hi"', "x"]


def test_join_then_split_round_trips():
    fields = ['he said "no"', "a,b", "plain", ""]
    assert split(join(fields)) == fields
