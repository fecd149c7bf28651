"""create_app(settings): the FastAPI application, its state opened in the lifespan."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import audit, collections, documents, errors, health, keys, openapi, page, search
from app.api.auth import ApiKeyMiddleware, Gate, configured_grants, load_keys
from app.api.body_limit import BodyLimitMiddleware
from app.api.hot import HotRoutes, NeardupApp
from app.api.metrics import Metrics, MetricsMiddleware
from app.api.request_id import RequestIdMiddleware
from app.backends.embedded.keys import KEYS_FILE, MemoryKeyStore, SQLiteKeyStore
from app.backends.embedded.registry import Registry
from app.config import Settings
from app.memory import release_free_memory
from app.service.key_ring import KeyRing, KeyStore
from app.service.protocols import ServiceBackend
from app.storage import MemoryStore, Store
from app.storage.base import DATABASE_FILE
from app.storage.segments import SegmentStore
from app.storage.sqlite import SQLiteStore

log = logging.getLogger("neardup")

StoreFactory = Callable[[Settings], Store]
__all__ = ["DATABASE_FILE", "create_app", "memory_store", "sqlite_store"]


def sqlite_store(settings: Settings, segments: SegmentStore | None = None) -> Store:
    """The database of ``settings``; its segments beside it, or ``segments`` where the
    caller made them already (``neardup serve`` has them read ahead)."""
    return SQLiteStore(
        settings.data_dir / DATABASE_FILE,
        settings.synchronous,
        segments=segments if segments is not None else "beside" if settings.segments else None,
    )


def memory_store(settings: Settings) -> Store:
    """For tests and throw-away services: nothing survives the process."""
    return MemoryStore()


def create_app(
    settings: Settings | None = None,
    store_factory: StoreFactory | None = None,
    clock: Callable[[], float] = time.time,
    hot_routes: bool = True,
) -> FastAPI:
    """A new application; nothing is opened until its lifespan starts. ``clock`` (Unix
    seconds) is what retention measures ages against: tests pass a fake one. Without
    ``hot_routes`` FastAPI serves every request (tests compare the two)."""
    settings = settings or Settings()
    # Read now: a key file that cannot be read stops the start instead of leaving /v1 open.
    api_keys = load_keys(settings.api_keys, settings.api_key_file)
    key_ring = KeyRing(configured_grants(api_keys), clock)
    open_store = store_factory or sqlite_store
    # The audit lines are written whatever the service's log level (app/api/audit.py).
    audit.audit_log.setLevel(logging.INFO)
    if settings.audit_log is not None:
        audit.log_to_file(settings.audit_log)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry, key_store = _backend(settings, open_store, clock, app.state.metrics)
        if key_ring.open:
            key_store.close()  # an open service checks no key (app/service/key_ring.py)
        else:
            key_ring.attach(key_store)

        def rebuild() -> None:
            # Off the event loop so that /healthz answers while the indexes are rebuilt.
            try:
                registry.open()
                release_free_memory()
                # What the start built lives as long as the process: out of the cyclic
                # collector's way, a full collection scans only what came since, not the
                # rebuilt state that would otherwise stall a request (docs/journal.md, "Issue 11").
                gc.freeze()
                registry.start_background(app.state.metrics)
            except Exception as error:
                log.exception("start-up failed")
                app.state.startup_error = str(error)
                return
            app.state.registry = registry
            app.state.ready.set()

        builder = threading.Thread(target=rebuild, name="rebuild")
        builder.start()
        try:
            yield
        finally:
            builder.join()
            key_ring.close()
            registry.close()
            gc.unfreeze()  # what this app held may be collected again (tests run many)

    app = NeardupApp(
        title="neardup",
        version="1",
        summary="Have we seen this document, or one nearly the same?",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.registry = None
    app.state.ready = threading.Event()
    app.state.startup_error = None
    app.state.metrics = Metrics(lambda: app.state.registry)
    app.state.key_ring = key_ring
    gate = Gate(key_ring, settings.metrics_require_key, clock)
    app.state.gate = gate
    errors.install(app)
    openapi.install(app)
    # The routes themselves, not include_router: FastAPI matches an included router's
    # routes twice per request (the router, then its route), and the hot routes (search,
    # inserts) come first because routes are tried in order.
    routers = (
        search.router,
        documents.router,
        collections.router,
        keys.router,
        health.router,
        page.router,
    )
    for router in routers:
        for route in router.routes:
            app.router.routes.append(route)
    # The last added runs first: ids and logs around everything, then metrics, then the
    # key check, which refuses before the body limit lets any body be read.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.body_limit_bytes)
    app.add_middleware(ApiKeyMiddleware, gate=gate)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    if hot_routes:
        app.hot_routes = HotRoutes(
            app, app.full_stack, gate, settings.body_limit_bytes, app.state.metrics
        )
    return app


def _backend(
    settings: Settings,
    open_store: StoreFactory,
    clock: Callable[[], float],
    metrics: Metrics,
) -> tuple[ServiceBackend, KeyStore]:
    """The collections' backend the settings name and the store of its API keys: Redis
    (NEARDUP_BACKEND) or the embedded service on its database."""
    if settings.backend is not None:
        # Imported here: redis-py is an extra the embedded service does not need.
        from app.backends.redis.keys import RedisKeyStore
        from app.backends.redis.registry import RedisRegistry

        redis = RedisRegistry(
            settings.backend,
            max_collections=settings.max_collections,
            wait_replicas=settings.redis_wait_replicas,
            clock=clock,
            max_documents=settings.max_documents,
            shard_bits=settings.redis_shard_bits,
        )
        return redis, RedisKeyStore(settings.backend)
    # A damaged database stops the start here, with a message that says what to do; the
    # service never starts empty on top of data it could not read.
    store = open_store(settings)
    store.observe_commits(metrics.record_commit)
    embedded = Registry(
        store, settings.max_collections, clock=clock, max_documents=settings.max_documents
    )
    if isinstance(store, MemoryStore):
        return embedded, MemoryKeyStore()
    return embedded, SQLiteKeyStore(settings.data_dir / KEYS_FILE)
