"""``neardup search``, ``neardup insert`` and ``neardup keys``: the client from the shell.

They talk to a running service over HTTP (``--url``, or NEARDUP_URL, default
http://127.0.0.1:8000; ``--api-key`` or NEARDUP_API_KEY) and import nothing of the
server: app/cli.py registers them with ``add_commands``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import IO, Any

from neardup_client._base import DEFAULT_MAX_BATCH_DOCUMENTS, DEFAULT_URL, Retry
from neardup_client._errors import APIError, TransportError
from neardup_client._models import (
    BatchItem,
    DocumentError,
    InsertResult,
    Match,
    NewDocument,
    NewPage,
)
from neardup_client._sync import Client


def match_json(match: Match) -> dict[str, Any]:
    return {
        "id": match.id,
        "similarity": match.similarity,
        "hamming_distance": match.hamming_distance,
        "methods": list(match.methods),
    }


def result_json(result: BatchItem) -> dict[str, Any]:
    """An answer as the service wrote it."""
    if isinstance(result, DocumentError):
        return {"id": result.id, "error": {"code": result.code, "message": result.message}}
    return {
        "id": result.id,
        "inserted": result.inserted,
        "duplicate_of": result.duplicate_of,
        "cluster_id": result.cluster_id,
        "matches": [match_json(match) for match in result.matches],
    }


def _print(data: Any, out: IO[str]) -> None:
    out.write(json.dumps(data, ensure_ascii=False) + "\n")


def _client(arguments: argparse.Namespace) -> Client:
    return Client(
        arguments.url,
        api_key=arguments.api_key or None,
        timeout=arguments.timeout,
        retry=Retry(retries=arguments.retries),
        max_batch_documents=getattr(arguments, "batch_size", None) or DEFAULT_MAX_BATCH_DOCUMENTS,
    )


def _text(arguments: argparse.Namespace, command: str) -> str:
    if arguments.file is not None:
        if arguments.text is not None:
            sys.exit(f"neardup {command}: give a TEXT or --file, not both")
        with open(arguments.file, encoding="utf-8") as file:
            return file.read()
    if arguments.text is None or arguments.text == "-":
        if arguments.text is None and sys.stdin.isatty():
            sys.exit(f"neardup {command}: give a TEXT, --file PATH, or the text on stdin")
        return sys.stdin.read()
    text: str = arguments.text
    return text


def _time(value: str) -> str | int | float:
    """A time argument: Unix seconds as a number, anything else as the string it is."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _table(matches: list[Match], out: IO[str]) -> None:
    if not matches:
        out.write("no match\n")
        return
    width = max(2, *(len(match.id) for match in matches))
    out.write(f"{'id':<{width}}  similarity  hamming  methods\n")
    for match in matches:
        out.write(
            f"{match.id:<{width}}  {match.similarity:>10.3f}  {match.hamming_distance:>7}  "
            f"{','.join(match.methods)}\n"
        )


def search(arguments: argparse.Namespace) -> int:
    text = _text(arguments, "search")
    with _client(arguments) as client:
        matches = client.search(
            arguments.collection,
            text,
            limit=arguments.limit,
            min_similarity=arguments.min_similarity,
            max_distance=arguments.max_distance,
            html=arguments.html,
            since=arguments.since,
            until=arguments.until,
        )
    if arguments.format == "table":
        _table(matches, sys.stdout)
    else:
        _print({"matches": [match_json(match) for match in matches]}, sys.stdout)
    return 0


def _jsonl_documents(
    stream: IO[str], line_of: list[int], refused: dict[int, dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """The documents of the lines; a line that is not a JSON object is refused here
    (``refused[line]``) and not sent; ``line_of[position]`` is each sent one's line."""
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except ValueError as error:
            document, problem = None, f"not JSON: {error}"
        else:
            problem = "not a JSON object"
        if not isinstance(document, dict):
            refused[number] = {"id": None, "error": {"code": "invalid_line", "message": problem}}
            continue
        line_of.append(number)
        yield document


def _insert_jsonl(arguments: argparse.Namespace, client: Client) -> int:
    stream = sys.stdin if arguments.jsonl == "-" else open(arguments.jsonl, encoding="utf-8")  # noqa: SIM115
    counts = {"inserted": 0, "duplicates": 0, "not inserted": 0, "refused": 0}
    line_of: list[int] = []
    refused: dict[int, dict[str, Any]] = {}

    def flush_refused(before: float) -> None:
        for number in sorted(line for line in refused if line < before):
            _print({"line": number, **refused.pop(number)}, sys.stdout)
            counts["refused"] += 1

    try:
        documents = _jsonl_documents(stream, line_of, refused)
        results = client.insert_many(
            arguments.collection, documents, on_duplicate=arguments.on_duplicate
        )
        for position, result in enumerate(results):
            flush_refused(line_of[position])
            _print({"line": line_of[position], **result_json(result)}, sys.stdout)
            if isinstance(result, DocumentError):
                counts["refused"] += 1
            else:
                counts["inserted" if result.inserted else "not inserted"] += 1
                counts["duplicates"] += result.is_duplicate
        flush_refused(float("inf"))
    finally:
        if stream is not sys.stdin:
            stream.close()
    total = sum(counts[key] for key in ("inserted", "not inserted", "refused"))
    print(
        f"neardup insert: {total} documents: {counts['inserted']} inserted, "
        f"{counts['not inserted']} not inserted (skipped or retries), "
        f"{counts['duplicates']} near-duplicates, {counts['refused']} refused",
        file=sys.stderr,
    )
    return 1 if counts["refused"] else 0


def _warc_documents(paths: Sequence[str], progress: _Progress) -> Iterator[NewPage]:
    """A document per HTML response of the files, as ``neardup dedup`` reads them: the
    URL as id, WARC-Date as time, the page as fetched (base64) with its charset."""
    from neardup_client.warc import html_responses

    for path in paths:
        for response in html_responses(path):
            progress.read(response.offset)
            yield NewPage(
                response.payload,
                url=response.url,
                charset=response.charset,
                metadata={"warc_record_id": response.record_id},
                timestamp=response.date or None,
            )
        progress.next_file()


class _Progress:
    """A line on stderr, rewritten at most once a second while a terminal reads it:
    pages answered and the share of the files' bytes read."""

    def __init__(self, paths: Sequence[str], shown: bool) -> None:
        self.total = sum(os.path.getsize(path) for path in paths)
        self.shown = shown
        self.done_files = 0  # bytes of the files read to their end
        self.offset = 0
        self.pages = 0
        self.last = 0.0

    def read(self, offset: int) -> None:
        self.offset = offset

    def next_file(self) -> None:
        self.done_files += self.offset
        self.offset = 0

    def answered(self) -> None:
        self.pages += 1
        now = time.monotonic()
        if self.shown and now - self.last >= 1.0:
            self.last = now
            share = (self.done_files + self.offset) / max(self.total, 1)
            sys.stderr.write(f"\rneardup insert: {self.pages} pages, {share:.0%} of the WARC read")
            sys.stderr.flush()

    def end(self) -> None:
        if self.shown and self.last:
            sys.stderr.write("\n")


def _insert_warc(arguments: argparse.Namespace, client: Client) -> int:
    """Each HTML response of the WARC files into the collection. Prints one answer a page
    (its error in place where refused) and a summary; exits 1 if any was refused. Run
    again after an interruption, it resumes: pages already stored come back as retries
    of the same document (``inserted: false``) and change nothing."""
    progress = _Progress(arguments.warc, sys.stderr.isatty() and not arguments.quiet)
    counts = dict.fromkeys(("new", "duplicates", "contained", "already stored", "refused"), 0)
    documents = _warc_documents(arguments.warc, progress)
    try:
        for result in client.insert_many(
            arguments.collection, documents, on_duplicate=arguments.on_duplicate
        ):
            progress.answered()
            line = result_json(result)
            if isinstance(result, DocumentError):
                counts["refused"] += 1
            else:
                if result.contained_in is not None:
                    line["contained_in"] = [match_json(match) for match in result.contained_in]
                if not result.inserted and result.duplicate_of == result.id:
                    counts["already stored"] += 1
                elif result.is_duplicate:
                    counts["duplicates"] += 1
                elif result.contained_in:
                    counts["contained"] += 1
                else:
                    counts["new"] += 1
            if not arguments.quiet or isinstance(result, DocumentError):
                _print(line, sys.stdout)
    finally:
        progress.end()
    summary = ", ".join(f"{count} {name}" for name, count in counts.items())
    print(f"neardup insert: {sum(counts.values())} pages: {summary}", file=sys.stderr)
    return 1 if counts["refused"] else 0


def insert(arguments: argparse.Namespace) -> int:
    with _client(arguments) as client:
        if arguments.warc:
            single = (arguments.text, arguments.file, arguments.id, arguments.timestamp)
            if arguments.jsonl is not None or any(value is not None for value in single):
                sys.exit("neardup insert: --warc takes the documents from its files only")
            return _insert_warc(arguments, client)
        if arguments.jsonl is not None:
            single = (arguments.text, arguments.file, arguments.id, arguments.timestamp)
            if any(value is not None for value in single):
                sys.exit("neardup insert: --jsonl takes the documents from its lines only")
            return _insert_jsonl(arguments, client)
        metadata = None
        if arguments.metadata is not None:
            try:
                metadata = json.loads(arguments.metadata)
            except ValueError as error:
                sys.exit(f"neardup insert: --metadata is not JSON: {error}")
        document = NewDocument(_text(arguments, "insert"), arguments.id, metadata, arguments.html)
        result: InsertResult = client.insert(
            arguments.collection,
            document.text,
            id=document.id,
            metadata=document.metadata,
            html=document.html,
            on_duplicate=arguments.on_duplicate,
            timestamp=arguments.timestamp,
        )
    _print(result_json(result), sys.stdout)
    return 0


def _run(handler: Any) -> Any:
    def run(arguments: argparse.Namespace) -> None:
        try:
            status = handler(arguments)
        except APIError as error:
            sys.exit(f"neardup {arguments.command}: {error}")
        except TransportError as error:
            sys.exit(f"neardup {arguments.command}: cannot reach the service: {error}")
        except OSError as error:
            sys.exit(f"neardup {arguments.command}: {error}")
        if status:
            sys.exit(status)

    return run


def keys(arguments: argparse.Namespace) -> int:
    """``neardup keys create|list|update|delete``: one JSON line per key (create prints
    the secret, ``key``, which the service shows this once)."""
    with _client(arguments) as client:
        if arguments.verb == "create":
            made = client.create_key(
                arguments.name,
                arguments.actions.split(","),
                arguments.collections.split(","),
                arguments.description or "",
                arguments.expires_at,
                arguments.requests_per_second,
                arguments.documents_per_second,
            )
            shown = [made]
        elif arguments.verb == "list":
            shown = client.list_keys()
        elif arguments.verb == "update":
            shown = [client.update_key(arguments.id, _key_changes(arguments))]
        else:
            client.delete_key(arguments.id)
            return 0
    for key in shown:
        _print(
            {name: value for name, value in asdict(key).items() if value is not None}, sys.stdout
        )
    return 0


def _key_changes(arguments: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name in ("name", "description", "expires_at"):
        if getattr(arguments, name) is not None:
            changes[name] = getattr(arguments, name)
    for name in ("actions", "collections"):
        if getattr(arguments, name) is not None:
            changes[name] = getattr(arguments, name).split(",")
    if arguments.requests_per_second is not None or arguments.documents_per_second is not None:
        changes["rate"] = {
            "requests_per_second": arguments.requests_per_second,
            "documents_per_second": arguments.documents_per_second,
        }
    return changes


def _add_keys_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "keys",
        help="create, list, update and revoke API keys (with an admin key)",
        description="Manage a running service's stored API keys; --api-key must be an admin "
        "key (a write key of NEARDUP_API_KEYS). Each key may do its --actions "
        "(search, documents.add, documents.delete, collections.create, collections.delete, "
        "collections.settings, export, metrics, *) on its --collections (names, prefix-* "
        "patterns, *). Prints one JSON line per key.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="a new key; prints its secret once")
    create.add_argument("name", help="what the key is for (shown in the audit trail)")
    create.add_argument("--actions", required=True, help="comma-separated actions")
    create.add_argument("--collections", required=True, help="comma-separated names or patterns")
    update = verbs.add_parser("update", help="change a key's fields")
    update.add_argument("id", help="the key's id")
    update.add_argument("--name")
    update.add_argument("--actions", help="comma-separated actions")
    update.add_argument("--collections", help="comma-separated names or patterns")
    for verb in (create, update):
        verb.add_argument("--description")
        verb.add_argument("--expires-at", help="when the key stops working (ISO 8601)")
        verb.add_argument("--requests-per-second", type=float, help="the key's request rate")
        verb.add_argument("--documents-per-second", type=float, help="its documents' rate")
    listing = verbs.add_parser("list", help="every stored key (never their secrets)")
    delete = verbs.add_parser("delete", help="revoke a key at once")
    delete.add_argument("id", help="the key's id")
    for verb in (create, update, listing, delete):
        _connection_options(verb)
        verb.set_defaults(handler=_run(keys))


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("NEARDUP_URL", DEFAULT_URL),
        help=f"the service (default: NEARDUP_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("NEARDUP_API_KEY"),
        help="API key when the service has keys (default: NEARDUP_API_KEY)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument(
        "--retries",
        type=int,
        default=5,
        help="retries on connection errors, 503 and 429 (default 5; Retry-After honoured)",
    )


def _text_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("collection", help="collection name")
    parser.add_argument("text", nargs="?", help="the text ('-' or absent: stdin)")
    parser.add_argument("--file", help="read the text from this file")
    parser.add_argument(
        "--html", action="store_true", help="the text is a web page: its main content is matched"
    )


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``search``, ``insert`` and ``keys`` on the ``neardup`` command's subparsers."""
    search_parser = commands.add_parser(
        "search",
        help="find near-duplicates of a text in a running service (nothing is stored)",
        description="Search a collection of a running service for a text's near-duplicates. "
        'Prints the service\'s answer, {"matches": [...]}, as one JSON line (or a table).',
    )
    _text_options(search_parser)
    search_parser.add_argument("--limit", type=int, help="most matches (service default 10)")
    search_parser.add_argument("--min-similarity", type=float, help="lowest similarity")
    search_parser.add_argument("--max-distance", type=int, help="largest Hamming distance")
    search_parser.add_argument(
        "--since", type=_time, help="only documents at or after this time (ISO 8601 or Unix s)"
    )
    search_parser.add_argument("--until", type=_time, help="only documents at or before this time")
    search_parser.add_argument("--format", choices=("json", "table"), default="json")
    _connection_options(search_parser)
    search_parser.set_defaults(handler=_run(search))

    insert_parser = commands.add_parser(
        "insert",
        help="insert a text, or JSON lines of documents, into a running service",
        description="Insert one document (TEXT, --file or stdin; prints the answer as JSON) "
        'or, with --jsonl, one document per line ({"text", "id"?, "metadata"?, '
        '"html"?}) in batches: prints one result per line with its line number, a '
        "refused document's error in place; exits 1 if any was refused. With --warc, "
        "each HTML response of WARC files, as neardup dedup reads them: prints one "
        "result a page and a summary (new, duplicates, contained, already stored, "
        "refused); run it again to resume after an interruption.",
    )
    _text_options(insert_parser)
    insert_parser.add_argument("--id", help="document id (default: a new UUID)")
    insert_parser.add_argument("--metadata", help="a JSON object stored with the document")
    insert_parser.add_argument(
        "--timestamp",
        type=_time,
        help="the document's time (ISO 8601 or Unix seconds; default now)",
    )
    insert_parser.add_argument(
        "--on-duplicate",
        choices=("insert", "skip"),
        default="insert",
        help="skip: store nothing when it is a near-duplicate",
    )
    insert_parser.add_argument("--jsonl", help="a file of JSON lines ('-': stdin)")
    insert_parser.add_argument(
        "--warc",
        nargs="+",
        metavar="FILE",
        help="WARC files (gzipped or not): each HTML response a page, its URL the id, "
        "WARC-Date its time; run again to resume (stored pages are retries)",
    )
    insert_parser.add_argument(
        "--quiet", action="store_true", help="--warc: print refused pages and the summary only"
    )
    insert_parser.add_argument(
        "--batch-size",
        type=int,
        help=f"documents per batch (default {DEFAULT_MAX_BATCH_DOCUMENTS}, "
        "the service's NEARDUP_MAX_BATCH_DOCUMENTS default)",
    )
    _connection_options(insert_parser)
    insert_parser.set_defaults(handler=_run(insert))
    _add_keys_command(commands)
