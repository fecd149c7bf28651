"""The audit trail: one JSON line for every write and every key change.

Lines go to the ``neardup.audit`` logger (the service's log stream, stdout or stderr as
configured, one JSON object a line), and to NEARDUP_AUDIT_LOG when set. Each names the
key (its name and id, never the key), the action, the collection, the ids (or their
count), the status and outcome, and the request id:

    {"level": "INFO", "logger": "neardup.audit", "message": "documents.add",
     "key": "crawler", "key_id": "3f2a...", "action": "documents.add",
     "collection": "news", "ids": ["a1"], "count": 1, "status": 201, "outcome": "ok",
     "request_id": "..."}
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from app import logs
from app.service.keys import Grant

audit_log = logging.getLogger("neardup.audit")
# The most ids one line lists (a batch's limit is usually below it); ``count`` is exact.
MAX_IDS = 1000
_files: set[Path] = set()


def record(
    key: Grant | None,
    action: str,
    collection: str | None,
    status: int,
    ids: list[str] | None = None,
) -> None:
    """Write the line of one write or key change: one log record (a few microseconds
    for the logging machinery and the JSON)."""
    if not audit_log.isEnabledFor(logging.INFO):
        return
    outcome = "ok" if status < 400 else "failed" if status >= 500 else "refused"
    fields: dict[str, Any] = {
        "key": key.name if key is not None else None,
        "key_id": key.id if key is not None else None,
        "action": action,
        "collection": collection,
        "ids": ids[:MAX_IDS] if ids is not None else None,
        "count": len(ids) if ids is not None else None,
        "status": status,
        "outcome": outcome,
        "request_id": logs.request_id.get(),
    }
    audit_log.info(action, extra=fields)


def ids_in_answer(answer: bytes) -> list[str] | None:
    """The ids an insert, a batch or a key's creation answered: O(size of the answer)."""
    try:
        parsed = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    if isinstance(parsed.get("results"), list):
        return [str(item.get("id")) for item in parsed["results"] if isinstance(item, dict)]
    return [str(parsed["id"])] if "id" in parsed else None


def log_to_file(path: Path) -> None:
    """Also write the audit lines, as JSON, to ``path`` (appended; once per path)."""
    if path in _files:
        return
    _files.add(path)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.RequestIdFilter())
    audit_log.addHandler(handler)
    audit_log.setLevel(logging.INFO)
