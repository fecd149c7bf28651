"""Prometheus metrics: one registry per app, so tests can build as many apps as they like."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.histogram import Counter, Histogram, MetricFamilies
from app.api.middleware import HttpMiddleware, ResponseWatch
from app.service.protocols import ServiceFigures, ServiceOperations

MERGE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
COMMIT_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
EVICTION_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class IndexCollector:
    """Per collection: documents, duplicates, merges, index bytes, and per index the
    entries not merged yet and the tombstones held. Read when /metrics is scraped."""

    def __init__(self, registry_of: Any) -> None:
        self._registry_of = registry_of

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        registry: ServiceOperations | None = self._registry_of()
        # Filled from each collection's stats, under the family's key.
        families = {
            "documents": _per_collection(
                GaugeMetricFamily, "neardup_documents", "Live documents per collection"
            ),
            "duplicates": _per_collection(
                GaugeMetricFamily,
                "neardup_duplicates",
                "Live documents that joined an earlier document's cluster",
            ),
            "merges": _per_collection(
                GaugeMetricFamily, "neardup_merges", "Index merges since start per collection"
            ),
            "index_bytes": _per_collection(
                GaugeMetricFamily, "neardup_index_bytes", "Bytes held by the indexes"
            ),
        }
        unmerged = GaugeMetricFamily(
            "neardup_index_unmerged_entries",
            "Index entries in the insert buffer, not merged into the sorted arrays yet",
            labels=["collection", "index"],
        )
        tombstones = GaugeMetricFamily(
            "neardup_index_tombstones",
            "Deleted documents the index still holds until its next merge",
            labels=["collection", "index"],
        )
        retained = {  # as ``families``, exposed after the indexes' backlogs
            "evicted": _per_collection(
                CounterMetricFamily,
                "neardup_evicted_documents",
                "Documents evicted by the retention since the start",
            ),
            "expiring": _per_collection(
                GaugeMetricFamily,
                "neardup_expiring_documents",
                "Expired documents (hidden from every answer) not evicted yet",
            ),
        }
        oldest = _per_collection(
            GaugeMetricFamily,
            "neardup_oldest_timestamp_seconds",
            "Timestamp of the oldest live document, Unix seconds (absent when empty)",
        )
        eviction_seconds = _per_collection(
            CounterMetricFamily,
            "neardup_eviction_cpu_seconds",
            "CPU time spent evicting expired documents from memory",
        )
        store_eviction = CounterMetricFamily(
            "neardup_eviction_store_cpu_seconds",
            "CPU time the store spent removing evicted documents",
        )
        round_trips = CounterMetricFamily(
            "neardup_storage_round_trips",
            "Round trips to a networked storage (the Redis backend)",
        )
        failures = CounterMetricFamily(
            "neardup_storage_failures",
            "Failures of a networked storage by kind (redis_error, replicas_behind)",
            labels=["kind"],
        )
        if registry is not None:
            figures: ServiceFigures = registry.figures()
            if figures.round_trips is not None:
                round_trips.add_metric([], figures.round_trips)
            for kind, count in figures.failures.items():
                failures.add_metric([kind], count)
            for collection in figures.collections:
                name, stats = collection.name, collection.stats
                for key, family in (families | retained).items():
                    family.add_metric([name], stats[key])
                for index, backlog in collection.backlogs.items():
                    unmerged.add_metric([name, index], backlog.unmerged_entries)
                    tombstones.add_metric([name, index], backlog.tombstones)
                if stats["oldest_seconds"] is not None:
                    oldest.add_metric([name], stats["oldest_seconds"])
                if collection.eviction_cpu_seconds is not None:
                    eviction_seconds.add_metric([name], collection.eviction_cpu_seconds)
            if figures.store_eviction_cpu_seconds is not None:
                store_eviction.add_metric([], figures.store_eviction_cpu_seconds)
        yield from families.values()
        yield unmerged
        yield tombstones
        yield from retained.values()
        yield from (oldest, eviction_seconds, store_eviction)
        yield from (round_trips, failures)


def _per_collection(
    family: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, documentation: str
) -> GaugeMetricFamily | CounterMetricFamily:
    """A family of one sample a collection, labelled with its name."""
    return family(name, documentation, labels=["collection"])


class Metrics:
    """The service's own counters and histograms (app/api/histogram.py: cheaper to record
    than prometheus_client's), and the index figures read at each scrape."""

    def __init__(self, registry_of: Any) -> None:
        self.registry = CollectorRegistry()
        families = MetricFamilies()
        self.requests = families.counter(
            "neardup_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
        )
        self.latency = families.histogram(
            "neardup_request_seconds",
            "HTTP request latency by route",
            ["route", "method"],
            LATENCY_BUCKETS,
        )
        self.merge_seconds = families.histogram(
            "neardup_merge_seconds",
            "Duration of background index merges",
            ["collection"],
            MERGE_BUCKETS,
        )
        self.commit_documents = families.histogram(
            "neardup_commit_documents",
            "Documents made durable by one commit (group commit batch size)",
            [],
            COMMIT_SIZE_BUCKETS,
        )
        self.commit_changes = families.histogram(
            "neardup_commit_changes",
            "Requests' changes sharing one commit",
            [],
            COMMIT_SIZE_BUCKETS,
        )
        self.eviction_lock_seconds = families.histogram(
            "neardup_eviction_lock_seconds",
            "How long one eviction chunk held its collection's write lock",
            ["collection"],
            EVICTION_BUCKETS,
        )
        self.commit_seconds = families.histogram(
            "neardup_commit_seconds", "Duration of one commit, fsync included", [], LATENCY_BUCKETS
        )
        self.registry.register(families)
        self.registry.register(IndexCollector(registry_of))
        # The labelled children, found once: labels() takes a lock and builds a key.
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._timers: dict[tuple[str, str], Histogram] = {}

    def record_request(self, template: str, method: str, status: int, seconds: float) -> None:
        """One HTTP request, counted and timed under its route template."""
        counter = self._counters.get((template, method, status))
        if counter is None:
            counter = self.requests.labels(template, method, str(status))
            self._counters[(template, method, status)] = counter
        counter.inc()
        timer = self._timers.get((template, method))
        if timer is None:
            timer = self._timers[(template, method)] = self.latency.labels(template, method)
        timer.observe(seconds)

    def record_merge(self, collection: str, seconds: float) -> None:
        self.merge_seconds.labels(collection).observe(seconds)

    def record_eviction(self, collection: str, documents: int, seconds: float) -> None:
        self.eviction_lock_seconds.labels(collection).observe(seconds)

    def record_commit(self, changes: int, documents: int, seconds: float) -> None:
        self.commit_changes.observe(changes)
        self.commit_documents.observe(documents)
        self.commit_seconds.observe(seconds)


class MetricsMiddleware(HttpMiddleware):
    """Counts and times every HTTP request under its route template (not its raw path)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        watch = ResponseWatch(send)
        try:
            await self.app(scope, receive, watch.send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            elapsed = time.perf_counter() - started
            self.metrics.record_request(template, scope.get("method", ""), watch.status, elapsed)
