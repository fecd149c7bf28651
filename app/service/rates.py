"""Token buckets: a key's requests and documents a second. No I/O; the clock is given.

Each process keeps its own buckets (in memory): N processes over one Redis let a key
through N times its rate at most. That keeps a request free of a round trip; a rate kept
exactly across processes would cost one per request.

>>> buckets = Buckets()
>>> buckets.take("k", rate=2.0, amount=1, now=0.0)
0.0
>>> buckets.take("k", rate=2.0, amount=1, now=0.0)
0.0
>>> buckets.take("k", rate=2.0, amount=1, now=0.0)  # empty: half a second to wait
0.5
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# The most buckets kept; past it the longest-full ones are forgotten (a full bucket is
# what a new one would be, so forgetting it changes nothing).
MAX_BUCKETS = 100_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float
    rate: float

    def full_at(self) -> float:
        return self.updated + (self.rate - self.tokens) / self.rate


class Buckets:
    """Token buckets by name, each holding up to one second of its rate (the burst): a
    request of ``amount`` passes when the bucket holds ``min(amount, rate)`` tokens and
    takes ``amount`` (so a batch larger than a second's worth passes on a full bucket and
    the next waits). Thread-safe; O(1) a take."""

    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, name: str, rate: float, amount: float, now: float) -> float:
        """0.0 when ``amount`` was taken, else the seconds to wait before it would pass
        (nothing is taken then)."""
        with self._lock:
            bucket = self._buckets.get(name)
            if bucket is None:
                if len(self._buckets) >= MAX_BUCKETS:
                    self._forget_full(now)
                bucket = self._buckets[name] = _Bucket(rate, now, rate)
            else:
                elapsed = max(0.0, now - bucket.updated)
                bucket.tokens = min(rate, bucket.tokens + elapsed * rate)
                bucket.updated = now
                bucket.rate = rate
            needed = min(amount, rate)
            if bucket.tokens >= needed:
                bucket.tokens -= amount
                return 0.0
            return (needed - bucket.tokens) / rate

    def _forget_full(self, now: float) -> None:
        full = [name for name, bucket in self._buckets.items() if bucket.full_at() <= now]
        # None full: the oldest half goes (a burst of that many keys within a second).
        for name in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[name]
