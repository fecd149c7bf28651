"""The neardup command: a thin layer over the service."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

import uvicorn

from app.config import Settings
from app.main import create_app


def serve(arguments: argparse.Namespace) -> None:
    overrides = {
        key: value
        for key, value in (
            ("host", arguments.host),
            ("port", arguments.port),
            ("data_dir", arguments.data_dir),
        )
        if value is not None
    }
    settings = Settings(**overrides)
    # uvicorn shuts down gracefully on SIGTERM (stops accepting, finishes requests in
    # flight, runs the lifespan's close) and then re-raises the signal: exit 0 on it, as a
    # clean stop, instead of dying by it.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # One process owns the indexes: never several workers with copies that drift apart.
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        workers=1,
        timeout_graceful_shutdown=30,
    )


def _exit_cleanly(signum: int, frame: object) -> None:
    sys.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neardup",
        description="Real-time near-duplicate lookup service (SimHash, MinHash LSH, exact).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_parser = commands.add_parser(
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
    serve_parser.set_defaults(handler=serve)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    arguments = build_parser().parse_args(argv)
    arguments.handler(arguments)


if __name__ == "__main__":
    main()
