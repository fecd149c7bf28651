"""Preload a running neardup with N distinct documents through the batch API.

    .venv/bin/python -m loadtest.preload --url http://127.0.0.1:8000 --count 1000000

Documents ``pre-{i}`` for i in [start, start + count), text ``corpus.document(i)`` (3 KB
of varied Reuters by default, see devkit/documents.py), sent 256 to a batch by a few
concurrent httpx clients (devkit/preload.py); prints documents/s at the end. A load test
can then ask for the neighbours of ``pre-{i}`` and send near-duplicates of
``document(i)``. Only loopback addresses are accepted: this is a load generator, and
nothing but this machine is a target.
"""

from __future__ import annotations

import argparse
import sys

import httpx

from devkit.documents import DEFAULT_CHARS
from devkit.preload import BATCH_SIZE, CONCURRENCY, DEFAULT_URL, PreloadFailed, preload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"service (default {DEFAULT_URL})")
    parser.add_argument("--count", type=int, default=100_000, help="documents (default 100000)")
    parser.add_argument("--start", type=int, default=0, help="first i of pre-{i} (default 0)")
    parser.add_argument("--batch", type=int, default=BATCH_SIZE, help="documents per request")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="httpx clients")
    parser.add_argument(
        "--doc-chars",
        type=int,
        default=DEFAULT_CHARS,
        help=f"characters per document (default {DEFAULT_CHARS}; 0: natural story length)",
    )
    parser.add_argument("--collection", default="default")
    parser.add_argument("--prefix", default="pre", help="id prefix (default pre)")
    arguments = parser.parse_args()
    try:
        result = preload(
            arguments.url,
            arguments.count,
            start=arguments.start,
            batch_size=arguments.batch,
            concurrency=arguments.concurrency,
            chars=arguments.doc_chars,
            collection=arguments.collection,
            prefix=arguments.prefix,
        )
    except (PreloadFailed, ValueError, httpx.HTTPError) as error:
        sys.exit(f"preload: {error}")
    print(
        f"preloaded {result.documents:,} documents in {result.seconds:.1f} s: "
        f"{result.per_second:,.0f} documents/s"
    )


if __name__ == "__main__":
    main()
