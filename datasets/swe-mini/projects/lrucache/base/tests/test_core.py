from lrucache import LRUCache


def test_get_and_put():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1
    assert c.get("b", 0) == 0


def test_capacity_is_kept():
    c = LRUCache(2)
    for i in range(5):
        c.put(i, i)
    assert len(c) == 2
    assert 4 in c and 3 in c


def test_put_refreshes_recency():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 3)
    c.put("c", 4)
    assert "a" in c and "b" not in c
