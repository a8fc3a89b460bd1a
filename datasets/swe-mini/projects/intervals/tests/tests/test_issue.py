from intervals import covered, merge


def test_unsorted_input_is_merged():
    assert merge([(5, 8), (1, 3), (2, 6)]) == [(1, 8)]


def test_covered_counts_unsorted_overlaps_once():
    assert covered([(4, 6), (0, 5)]) == 6
