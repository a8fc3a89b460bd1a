from intervals import covered, merge


def test_disjoint_intervals_stay_apart():
    assert merge([(1, 2), (4, 5)]) == [(1, 2), (4, 5)]


def test_overlapping_intervals_merge():
    assert merge([(1, 4), (3, 6)]) == [(1, 6)]


def test_touching_intervals_merge():
    assert merge([(1, 3), (3, 5)]) == [(1, 5)]


def test_covered_length():
    assert covered([(0, 2), (1, 4)]) == 4


def test_reversed_interval_is_rejected():
    try:
        merge([(3, 1)])
    except ValueError:
        return
    raise AssertionError("(3, 1) was accepted")
