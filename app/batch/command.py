"""``neardup dedup INPUT... --out DIR``: the command line of the corpus job."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from app.batch.readers import FORMATS, Fields, InputError, holds_pages

ENGINES = ("local", "spark")


def add_parser(commands: Any) -> None:
    """Register ``dedup`` on the subcommands of ``neardup``."""
    parser = commands.add_parser(
        "dedup",
        help="find every near-duplicate pair of a corpus and keep one document per cluster",
        description="De-duplicate a corpus with the service's fingerprints and match rule. "
        "Writes DIR/pairs.jsonl ({a, b, similarity, methods}: every matching pair once, a "
        "before b in input order), DIR/clusters.jsonl ({id, cluster_id} for every "
        "document: connected components of the pairs, named by their first document), "
        "DIR/kept.jsonl (the input record of each cluster's first document) and "
        "DIR/summary.json; prints the summary. See docs/dedup.md.",
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="JSON lines, CSV or Parquet")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="input format (default: from each file's extension: .jsonl/.ndjson/.json, "
        ".csv, .tsv, .parquet/.pq, optionally .gz)",
    )
    parser.add_argument(
        "--id-field",
        default="id",
        help="field holding a document's id (default id; a record without it gets its "
        "position in the input, from 0)",
    )
    parser.add_argument(
        "--text-field",
        action="append",
        help="field holding text (repeatable: the fields are joined by a newline; default text)",
    )
    parser.add_argument(
        "--timestamp-field",
        help="field holding a document's time, for a match_window in --settings: ISO 8601 "
        "with a UTC offset or Unix seconds, as the service's timestamp (local engine)",
    )
    parser.add_argument(
        "--settings",
        help="collection settings as JSON, or @FILE: the body of PUT /v1/collections/{name} "
        "or the answer of GET (default: a new collection's settings)",
    )
    parser.add_argument(
        "--html",
        action="store_true",
        help="the text fields hold web pages: their main content (or visible text, by the "
        'settings\' html.extract) is matched, as the service reads "html": true; on for WARC '
        "input",
    )
    parser.add_argument(
        "--passages",
        action="store_true",
        help="also DIR/passages.jsonl, the pairs of documents that share "
        "passages (runs of the settings' passages.min_tokens equal words), with offsets and "
        "coverages",
    )
    parser.add_argument(
        "--drop-contained",
        action="store_true",
        help="leave out of kept.jsonl the documents at least 80%% inside "
        "another kept one (a story inside a roundup); implies --passages",
    )
    parser.add_argument("--engine", choices=ENGINES, default="local", help="default local")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="local engine: processes (default: every core, one per 64 MB of input at most)",
    )
    parser.add_argument(
        "--chunk-size", type=int, default=4096, help="local engine: documents per chunk"
    )
    parser.add_argument(
        "--master", default="local[*]", help="spark engine: the Spark master (default local[*])"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="spark engine: partitions of the shuffles (default: Spark's default parallelism)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="spark engine: a Spark setting (repeatable)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=dedup)


def _settings(value: str | None) -> Any:
    from pydantic import ValidationError

    from app.batch.rules import parse_settings
    from app.collection_config import CollectionConfig

    if value is None:
        return CollectionConfig()
    text = Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value
    try:
        return parse_settings(text)
    except (orjson.JSONDecodeError, ValidationError) as error:
        sys.exit(f"neardup dedup: --settings: {error}")


def dedup(arguments: argparse.Namespace) -> None:
    config = _settings(arguments.settings)
    fields = Fields(
        arguments.id_field,
        tuple(arguments.text_field or ["text"]),
        arguments.timestamp_field,
    )
    try:
        common: dict[str, Any] = {
            "out": arguments.out,
            "fields": fields,
            "format": arguments.format,
            "html": arguments.html or holds_pages(arguments.inputs, arguments.format),
            "progress": not arguments.quiet,
            "passages": arguments.passages or arguments.drop_contained,
            "drop_contained": arguments.drop_contained,
        }
        engine: Any
        options: Any
        if arguments.engine == "spark":
            import app.batch.spark as engine

            conf = tuple(arguments.spark_conf)
            options = engine.SparkOptions(
                master=arguments.master, partitions=arguments.partitions, conf=conf, **common
            )
        else:
            import app.batch.local as engine

            options = engine.Options(
                workers=arguments.workers,
                chunk_size=arguments.chunk_size,
                **common,
            )
        summary = engine.run(arguments.inputs, config, options)
    except InputError as error:
        sys.exit(f"neardup dedup: {error}")
    (arguments.out / "summary.json").write_bytes(
        orjson.dumps(summary.as_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    )
    print(summary.text())
