"""Counters and histograms for /metrics at a fraction of prometheus_client's cost.

prometheus_client's ``Histogram.observe`` walks its buckets in Python and takes a lock for
each value it changes, and a single insert makes four observations (its latency, and the
three of its group commit on the SQLite writer): a share of the GIL a single insert holds
worth removing (bench/bare_wrk.py --py-spy; docs/journal.md, "Issue 11"). Here an observation is
one ``bisect`` and two additions under one lock; the figures are turned into Prometheus's
families only when /metrics is scraped (``MetricFamilies.collect``), with the same names,
labels and ``le`` bounds as prometheus_client writes them.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


def _go_float(bound: float) -> str:
    """A bound as prometheus_client writes ``le`` (Go's float formatting: "0.005", "1.0")."""
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


class Histogram:
    """Observations counted in the first bucket whose upper bound holds them (the last,
    +Inf, holds the rest), with their sum. ``observe`` is O(log buckets) under one lock;
    ``snapshot`` O(buckets). Safe from any thread."""

    __slots__ = ("_counts", "_lock", "_sum", "bounds")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or any(math.isnan(b) for b in bounds):
            raise ValueError("bucket bounds must be distinct and ascending")
        self.bounds = [float(b) for b in bounds if b != math.inf]
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        at = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[at] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative counts per bound, +Inf last (so the last is the count), and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        running = 0
        cumulative = []
        for count in counts:
            running += count
            cumulative.append(running)
        return cumulative, total

    def _check(self) -> None:
        cumulative, total = self.snapshot()
        assert len(cumulative) == len(self.bounds) + 1
        assert all(a <= b for a, b in itertools.pairwise(cumulative))
        assert cumulative[-1] > 0 or total == 0.0


class Counter:
    """A number that only grows. ``inc`` is O(1) under one lock."""

    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount


C = TypeVar("C", Histogram, Counter)


class _Family(Generic[C]):
    """Children of one metric name, one per combination of label values (``labels``)."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], make: Callable[[], C]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self._make: Callable[[], C] = make
        self._children: dict[tuple[str, ...], C] = {}
        self._lock = threading.Lock()

    def labels(self, *values: str) -> C:
        """The child of these label values (made on first use). Callers on a hot path
        keep what it returns: it takes a lock."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        with self._lock:
            child = self._children.get(values)
            if child is None:
                child = self._children[values] = self._make()
            return child

    def _items(self) -> list[tuple[tuple[str, ...], C]]:
        with self._lock:
            return list(self._children.items())


class HistogramFamily(_Family[Histogram]):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames, lambda: Histogram(bounds))
        # The bounds as a histogram keeps them (checked, +Inf implied), written once.
        self._edges = [_go_float(b) for b in Histogram(bounds).bounds] + ["+Inf"]
        if not self.labelnames:
            self._unlabelled = self.labels()

    def observe(self, value: float) -> None:
        """For a family without labels."""
        self._unlabelled.observe(value)

    def metric(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._items():
            cumulative, total = child.snapshot()
            family.add_metric(list(values), list(zip(self._edges, cumulative, strict=True)), total)
        return family


class CounterFamily(_Family[Counter]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames, Counter)

    def metric(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._items():
            family.add_metric(list(values), child.value)
        return family


class MetricFamilies:
    """A prometheus_client collector of the families above (register it in a registry)."""

    def __init__(self) -> None:
        self.families: list[HistogramFamily | CounterFamily] = []

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float]
    ) -> HistogramFamily:
        family = HistogramFamily(name, documentation, labelnames, bounds)
        self.families.append(family)
        return family

    def counter(self, name: str, documentation: str, labelnames: Sequence[str]) -> CounterFamily:
        family = CounterFamily(name, documentation, labelnames)
        self.families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.metric()
