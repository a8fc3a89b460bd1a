"""An LRU cache on an ordered dict: the first key is the least recently used."""

from collections import OrderedDict


class LRUCache:
    """Keeps at most ``capacity`` items; adding one more evicts the least recently used."""

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items = OrderedDict()

    def __len__(self):
        return len(self._items)

    def __contains__(self, key):
        return key in self._items

    def get(self, key, default=None):
        """The value of ``key`` (which becomes the most recently used), else ``default``."""
        if key not in self._items:
            return default
        return self._items[key]

    def put(self, key, value):
        """Stores ``value``; evicts the least recently used item when full."""
        if key in self._items:
            self._items.move_to_end(key)
        self._items[key] = value
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
