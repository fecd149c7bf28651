"""app/api/histogram.py against prometheus_client's own Counter and Histogram: the same
observations give the same exposition (buckets, sums, counts, labels), from any thread."""

from __future__ import annotations

import random
import threading

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from app.api.histogram import Histogram, MetricFamilies
from app.api.metrics import COMMIT_SIZE_BUCKETS, LATENCY_BUCKETS


def _samples(registry: CollectorRegistry) -> list[str]:
    """The exposition's sample lines, without the _created series (a timestamp)."""
    return sorted(
        line
        for line in generate_latest(registry).decode().splitlines()
        if line and not line.startswith("#") and "_created" not in line
    )


@pytest.mark.parametrize("bounds", [LATENCY_BUCKETS, COMMIT_SIZE_BUCKETS, (0.5, 1.0, 2.0)])
def test_exposition_equals_prometheus_clients(bounds: tuple[float, ...]) -> None:
    rng = random.Random(7)
    # Values on the bounds, between them, below the first, above the last.
    values = [rng.choice(bounds) for _ in range(200)]
    values += [rng.uniform(-1.0, bounds[-1] * 2) for _ in range(500)]
    values += [float(rng.randrange(0, 40)) for _ in range(100)]

    reference = CollectorRegistry()
    theirs = prometheus_client.Histogram(
        "x_seconds", "doc", ["route"], buckets=bounds, registry=reference
    )
    their_counter = prometheus_client.Counter("x_requests", "doc", ["route"], registry=reference)
    ours_registry = CollectorRegistry()
    families = MetricFamilies()
    ours = families.histogram("x_seconds", "doc", ["route"], bounds)
    our_counter = families.counter("x_requests", "doc", ["route"])
    ours_registry.register(families)

    for value in values:
        route = rng.choice(["a", "b/{name}"])
        theirs.labels(route).observe(value)
        ours.labels(route).observe(value)
        their_counter.labels(route).inc()
        our_counter.labels(route).inc()
    assert _samples(ours_registry) == _samples(reference)


def test_unlabelled_family_and_the_help_lines() -> None:
    reference = CollectorRegistry()
    theirs = prometheus_client.Histogram(
        "y", "Requests' changes", buckets=COMMIT_SIZE_BUCKETS, registry=reference
    )
    ours_registry = CollectorRegistry()
    families = MetricFamilies()
    ours = families.histogram("y", "Requests' changes", [], COMMIT_SIZE_BUCKETS)
    ours_registry.register(families)
    for value in (1, 3, 3, 600, 5000):
        theirs.observe(value)
        ours.observe(value)
    text = generate_latest(ours_registry).decode()
    assert "# HELP y Requests' changes" in text and "# TYPE y histogram" in text
    assert _samples(ours_registry) == _samples(reference)


def test_observations_from_many_threads_are_all_counted() -> None:
    histogram = Histogram((1.0, 2.0, 3.0))
    per_thread, threads = 20_000, 8

    def observe(offset: int) -> None:
        for i in range(per_thread):
            histogram.observe(float((i + offset) % 4))

    workers = [threading.Thread(target=observe, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    cumulative, total = histogram.snapshot()
    n = per_thread * threads
    assert cumulative == [n // 2, 3 * n // 4, n, n]  # values 0,1 | 2 | 3 | none above
    assert total == sum(float(v % 4) for v in range(n))
    histogram._check()


def test_bounds_must_ascend() -> None:
    with pytest.raises(ValueError):
        Histogram((2.0, 1.0))
    with pytest.raises(ValueError):
        MetricFamilies().histogram("z", "doc", ["a"], (1.0,)).labels("a", "b")
