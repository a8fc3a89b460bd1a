from lrucache import LRUCache


def test_get_refreshes_recency():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)
    assert "a" in c
    assert "b" not in c


def test_missing_get_changes_nothing():
    c = LRUCache(1)
    c.put("a", 1)
    assert c.get("zzz") is None
    assert "a" in c
