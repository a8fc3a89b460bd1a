import stats

assert stats.mean([1, 2, 3]) == 2.0
assert stats.mean([2, 4]) == 3.0
assert stats.median([3, 1, 2]) == 2
assert stats.median([9, 7, 8, 1, 5]) == 7
