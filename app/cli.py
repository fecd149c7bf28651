"""The neardup command: a thin layer over the service."""

from __future__ import annotations

import argparse
import logging.config
import os
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from app.backends.redis.registry import RedisRegistry
    from app.config import Settings
    from app.storage.segments import SegmentStore
    from app.storage.sqlite import SQLiteStore
# The server's modules (uvicorn, FastAPI, numba) are imported by the commands that use
# them: `neardup search` and `neardup insert` are HTTP clients and start without them.
# Even the settings (pydantic, a noticeable import) wait: `neardup serve` first starts
# reading its segments (_segments_read_ahead; docs/benchmarks.md, "Start-up and restarts").


def serve(arguments: argparse.Namespace) -> None:
    from app.config import Settings

    overrides = {
        key: value
        for key, value in (
            ("host", arguments.host),
            ("port", arguments.port),
            ("data_dir", arguments.data_dir),
            ("workers", arguments.workers),
        )
        if value is not None
    }
    settings = Settings(**overrides)
    segments = _segments_to_serve(settings, getattr(arguments, "segments_read_ahead", None))

    import uvicorn

    from app import logs
    from app.api.auth import InvalidKeys
    from app.logs import logging_config
    from app.main import create_app, sqlite_store

    log_config = logging_config(settings.log_level, settings.log_format)
    if settings.workers > 1:
        _serve_workers(settings, overrides, log_config)
        return
    logging.config.dictConfig(log_config)
    logs.use_access_log(logs.AccessLog(sys.stderr, settings.log_format))
    try:
        app = create_app(settings, store_factory=partial(sqlite_store, segments=segments))
    except InvalidKeys as error:
        sys.exit(f"neardup serve: {error}")
    # uvicorn shuts down gracefully on SIGTERM (stops accepting, finishes requests in
    # flight, runs the lifespan's close) and then re-raises the signal: exit 0 on it, as a
    # clean stop, instead of dying by it.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # One process owns the indexes: never several workers with copies that drift apart.
    uvicorn.run(app, workers=1, **_server_options(settings, log_config))


def _server_options(settings: Settings, log_config: dict[str, object]) -> dict[str, Any]:
    """uvicorn's options, the same for one worker and for several."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "log_config": log_config,
        "access_log": False,
        # The C event loop and HTTP parser: measured in docs/benchmarks.md.
        "loop": "uvloop",
        "http": "httptools",
        "timeout_graceful_shutdown": 30,
    }


def _serve_workers(
    settings: Settings, overrides: dict[str, object], log_config: dict[str, object]
) -> None:
    """``neardup serve`` with several uvicorn worker processes, on the Redis backend only:
    each worker is a new interpreter that builds its own app by ``worker_app``."""
    import uvicorn

    from app.api.auth import InvalidKeys
    from app.main import create_app

    if settings.backend is None:
        sys.exit(
            f"neardup serve: {settings.workers} workers (--workers, NEARDUP_WORKERS) need "
            "NEARDUP_BACKEND (Redis): the embedded service keeps its indexes in one process, "
            "so it runs one worker; set NEARDUP_BACKEND=redis://... or use 1 worker"
        )
    logging.config.dictConfig(log_config)
    try:
        create_app(settings)  # reads the key file: a bad one stops the start here, once
    except InvalidKeys as error:
        sys.exit(f"neardup serve: {error}")
    # The workers read their settings from the environment they inherit: the options too.
    for name, value in overrides.items():
        os.environ[f"NEARDUP_{name.upper()}"] = str(value)
    signal.signal(signal.SIGTERM, _exit_cleanly)  # until uvicorn's supervisor takes it
    uvicorn.run(
        f"{__name__}:worker_app",
        factory=True,
        workers=settings.workers,
        **_server_options(settings, log_config),
    )


def worker_app() -> FastAPI:
    """The app of one worker of ``neardup serve --workers N`` (uvicorn calls it by name in
    each worker process): logging and the access log as ``serve`` sets them up, the
    settings from the environment (NEARDUP_*, the command's options included)."""
    from app import logs
    from app.config import Settings
    from app.main import create_app

    settings = Settings()
    logging.config.dictConfig(logs.logging_config(settings.log_level, settings.log_format))
    logs.use_access_log(logs.AccessLog(sys.stderr, settings.log_format))
    return create_app(settings)


def _settings(data_dir: str | None) -> Settings:
    from app.config import Settings

    return Settings() if data_dir is None else Settings(data_dir=Path(data_dir))


def _store(settings: Settings) -> SQLiteStore:
    from app.storage.base import DATABASE_FILE
    from app.storage.sqlite import SQLiteStore

    return SQLiteStore(settings.data_dir / DATABASE_FILE, settings.synchronous)


def _redis(settings: Settings) -> RedisRegistry:
    """The Redis backend's collections (NEARDUP_BACKEND), for export and import."""
    from app.backends.redis.registry import RedisRegistry

    assert settings.backend is not None
    return RedisRegistry(
        settings.backend,
        wait_replicas=settings.redis_wait_replicas,
        shard_bits=settings.redis_shard_bits,
    )


def export(arguments: argparse.Namespace) -> None:
    """The embedded service's data directory, or with NEARDUP_BACKEND the Redis backend's
    collections, as JSON lines."""
    # Imported here, as in import_: `neardup serve` starts without them.
    from tqdm import tqdm

    from app.transfer import export_lines

    settings = _settings(arguments.data_dir)
    out = sys.stdout if arguments.output == "-" else open(arguments.output, "w")  # noqa: SIM115
    try:
        if settings.backend is not None:
            from app.backends.redis.transfer import export_lines as export_redis

            registry = _redis(settings)
            try:
                with tqdm(unit="line", desc="export", file=sys.stderr) as progress:
                    for line in export_redis(registry, arguments.collection or ()):
                        out.write(line + "\n")
                        progress.update()
            finally:
                registry.close()
            return
        store = _store(settings)
        try:
            collections = [
                stored
                for stored in store.load()
                if not arguments.collection or stored.name in arguments.collection
            ]
            total = sum(len(stored.documents) + 1 for stored in collections)
            with tqdm(total=total, unit="line", desc="export", file=sys.stderr) as progress:
                for line in export_lines(collections):
                    out.write(line + "\n")
                    progress.update()
        finally:
            store.close()
    finally:
        if out is not sys.stdout:
            out.close()


def import_(arguments: argparse.Namespace) -> None:
    """Into the embedded service's data directory, or with NEARDUP_BACKEND into the
    Redis backend (collections that do not exist yet, either way)."""
    from tqdm import tqdm

    from app.transfer import ImportFailed, ImportTarget, import_lines

    settings = _settings(arguments.data_dir)
    target: ImportTarget
    if settings.backend is not None:
        from app.backends.redis.transfer import RedisImport

        registry = _redis(settings)
        target, close = RedisImport(registry), registry.close
    else:
        store = _store(settings)
        target, close = store, store.close
    try:
        with open(arguments.file) as lines:
            progress = tqdm(lines, unit="line", desc="import", file=sys.stderr)
            counts = import_lines(target, progress)
    except ImportFailed as error:
        sys.exit(f"neardup import: {error}")
    finally:
        close()
    for name, count in counts.items():
        print(f"{name}: {count} documents imported", file=sys.stderr)


def check(arguments: argparse.Namespace) -> None:
    """Verify the database (every page) and the index segments of the embedded service's
    data directory against it: a JSON line for the database, then one a collection;
    exit 1 if anything is damaged."""
    import json

    from app.backends.embedded.check import check_store

    store = _store(_settings(arguments.data_dir))
    try:
        integrity = store.integrity()
        database = {"database": "ok"}
        if integrity != "ok":
            database = {"database": "damaged", "problem": integrity}
        print(json.dumps(database))
        reports = check_store(store)
    finally:
        store.close()
    for report in reports:
        print(json.dumps(report))
    if integrity != "ok" or any(report["segment"] == "damaged" for report in reports):
        sys.exit(1)


def warm_up(arguments: argparse.Namespace) -> None:
    from app.warmup import compile_kernels

    seconds = compile_kernels()
    print(f"neardup warm-up: every kernel in numba's cache after {seconds:.1f} s", file=sys.stderr)


def _exit_cleanly(signum: int, frame: object) -> None:
    sys.exit(0)


def _command(
    commands: Any, handler: Callable[[argparse.Namespace], None], name: str, **texts: str
) -> argparse.ArgumentParser:
    """A subcommand's parser, ``handler`` set as what ``main`` runs for it."""
    parser: argparse.ArgumentParser = commands.add_parser(name, **texts)
    parser.set_defaults(handler=handler)
    return parser


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    """--data-dir of the offline commands (export, import, check): one option, one help."""
    parser.add_argument("--data-dir", help="data directory (default: NEARDUP_DATA_DIR or ./data)")


def build_parser() -> argparse.ArgumentParser:
    from app.config import Settings

    parser = argparse.ArgumentParser(
        prog="neardup",
        description="Real-time near-duplicate lookup service (SimHash, MinHash LSH, exact).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_parser = _command(
        commands,
        serve,
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Settings come from NEARDUP_* environment "
        "variables; these options override them.",
    )
    serve_parser.add_argument(
        "--host", help=f"address to listen on (default {Settings.model_fields['host'].default})"
    )
    serve_parser.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve_parser.add_argument("--data-dir", help="data directory (default ./data)")
    serve_parser.add_argument(
        "--workers",
        type=int,
        help="worker processes (default 1; more only with NEARDUP_BACKEND, the Redis backend)",
    )

    export_parser = _command(
        commands,
        export,
        "export",
        help="write collections as JSON lines (a backup, or a move to another machine)",
        description="Write collections and their documents (fingerprints, metadata, clusters) "
        "as JSON lines. Safe while the service runs.",
    )
    _add_data_dir(export_parser)
    export_parser.add_argument(
        "--collection", action="append", help="only this collection (repeatable; default all)"
    )
    export_parser.add_argument("--output", default="-", help="file to write (default stdout)")

    import_parser = _command(
        commands,
        import_,
        "import",
        help="load an export into a data directory (stop the service first)",
        description="Load JSON lines written by `neardup export` into a data directory whose "
        "database does not hold those collections yet. Stop the service first: it reads its "
        "data only when it starts.",
    )
    import_parser.add_argument("file", help="the export file")
    _add_data_dir(import_parser)

    check_parser = _command(
        commands,
        check,
        "check",
        help="verify the database and the index segments against it",
        description="Verify the database (SQLite's quick_check of every page: a start "
        "reads only what it needs, and SQLite refuses a damaged page when it reads it), "
        "then each collection's index segment (neardup.segments/ beside the "
        "database): its files' checksums, format and settings; the fingerprints it holds "
        "against the database's; every index started from it against its invariants. One "
        "JSON line for the database (ok or damaged), then one a collection (segment: ok, "
        "none or damaged, and the problem); exit 1 if anything is damaged. A damaged "
        "segment is never used: the service rebuilds that collection's indexes from the "
        "database at its next start. It may run beside the service; a segment the "
        "service replaces meanwhile can read as missing: check again.",
    )
    _add_data_dir(check_parser)

    _command(
        commands,
        warm_up,
        "warm-up",
        help="compile the numeric kernels into numba's cache (part of the install)",
        description="Compile every numba kernel the service and `neardup dedup` use into "
        "numba's on-disk cache (beside the sources, or NUMBA_CACHE_DIR), so that `neardup "
        "serve` starts in about a second and the first dedup starts at once, instead of "
        "compiling them (a minute or more). `make run` and the Docker build run it; run it again "
        "after changing app/core/ or app/batch/. Touches no data directory.",
    )

    from app.batch.command import add_parser as add_dedup_parser

    add_dedup_parser(commands)  # dedup: the corpus job (docs/dedup.md)

    from neardup_client.cli import add_commands

    add_commands(commands)  # search, insert: HTTP clients of a running service
    return parser


def _segments_to_serve(settings: Settings, early: SegmentStore | None) -> SegmentStore | None:
    """The segments ``serve`` opens, reading ahead: those started early where the
    settings name the same directory, else new ones (None where the service keeps none).
    An early read-ahead not used is ended: it holds what it read until then."""
    from app.storage.base import DATABASE_FILE
    from app.storage.segments import SegmentStore, segments_beside

    segments = None
    if settings.backend is None and settings.segments and settings.workers == 1:
        root = segments_beside(settings.data_dir / DATABASE_FILE)
        segments = early if early is not None and early.root == root else SegmentStore(root)
        segments.read_ahead()
    if early is not None and early is not segments:
        early.end_read_ahead()
    return segments


def _segments_read_ahead(argv: Sequence[str]) -> SegmentStore | None:
    """For ``neardup serve``: the segments of the data directory it will most likely
    serve, their reading started now, before the settings and the server are imported
    (app/storage/read_ahead.py: why). A guess from the arguments and the environment,
    which serve() uses only where its settings name the same directory."""
    if not argv or argv[0] != "serve":
        return None
    options: dict[str, str] = {}
    for at, word in enumerate(argv[1:], start=1):
        name, equals, value = word.partition("=")
        if name in ("--data-dir", "--workers"):
            options[name] = value if equals else (argv[at + 1] if at + 1 < len(argv) else "")
    if (
        options.get("--workers", "1") != "1"
        or os.environ.get("NEARDUP_BACKEND")
        or os.environ.get("NEARDUP_SEGMENTS", "true").lower() in ("0", "false", "no", "off")
    ):
        return None
    from app.storage.base import DATABASE_FILE
    from app.storage.segments import SegmentStore, segments_beside

    data_dir = options.get("--data-dir") or os.environ.get("NEARDUP_DATA_DIR") or "data"
    segments = SegmentStore(segments_beside(Path(data_dir) / DATABASE_FILE))
    segments.read_ahead()
    return segments


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    early = _segments_read_ahead(sys.argv[1:] if argv is None else argv)
    arguments = build_parser().parse_args(argv)
    arguments.segments_read_ahead = early
    arguments.handler(arguments)


if __name__ == "__main__":
    main()
