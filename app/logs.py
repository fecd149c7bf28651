"""Logging: one JSON object per line (or plain text), each carrying the request id.

The request id lives in a context variable set by RequestIdMiddleware; a filter copies it
onto every record, so log lines from handlers, the thread pool and the service layer of
one request share it without passing it around.
"""

from __future__ import annotations

import atexit
import logging
import logging.config
import threading
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import orjson

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

# What every LogRecord carries; anything else on a record came from ``extra=`` and is
# written as a field of its own. uvicorn's terminal-coloured copy of its message is noise.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: level, logger, message, the record's extra fields,
    request_id, time (ISO 8601, UTC) and the traceback as exc_info when there is one.

    Written with orjson: the access line of every request goes through here, and
    python-json-logger took about twice as long a line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in record.__dict__.keys() - _RECORD_ATTRIBUTES:
            line[name] = record.__dict__[name]
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        line["time"] = datetime.fromtimestamp(record.created, UTC).isoformat()
        return orjson.dumps(line, default=str).decode()


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def logging_config(level: str, style: Literal["json", "text"]) -> dict[str, Any]:
    """A dictConfig for the service and uvicorn's own loggers."""
    if style == "json":
        formatter: dict[str, Any] = {"()": JsonFormatter}
    else:
        formatter = {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "default",
        "filters": ["request_id"],
        "stream": "ext://sys.stderr",
    }
    loggers = {
        name: {"handlers": ["default"], "level": level.upper(), "propagate": False}
        for name in ("neardup", "uvicorn", "uvicorn.error")
    }
    # Each request is logged once by the service, with its id; uvicorn's own line is off.
    loggers["uvicorn.access"] = {"handlers": [], "level": "WARNING", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"default": formatter},
        "handlers": {"default": handler},
        "loggers": loggers,
        "root": {"handlers": ["default"], "level": "WARNING"},
    }


class AccessLog:
    """The access log's lines (one per request), written as nginx's buffered access_log
    writes them: gathered in memory and written to the stream in one write when
    ``flush_bytes`` have gathered, ``flush_seconds`` after the first line of a batch (by
    a thread), and at exit.

    The lines are those the "neardup.access" logger's handler would write (the same JSON
    fields, or the text format), without the logging machinery: a LogRecord, the filter,
    the handler's lock and a write and flush per line were a large share of a search's
    time on the event loop, a line here a small one (docs/journal.md, "Issue 11"). The
    price: a line reaches the stream up to ``flush_seconds`` late, and a killed process
    loses the lines of its last ``flush_seconds``.
    """

    def __init__(
        self,
        stream: TextIO,
        style: Literal["json", "text"],
        flush_seconds: float = 0.2,
        flush_bytes: int = 65_536,
    ) -> None:
        self._stream = stream
        self._json = style == "json"
        self.flush_seconds = flush_seconds
        self.flush_bytes = flush_bytes
        self._lines: list[str] = []
        self._size = 0
        self._gather = threading.Lock()  # held for an append or a swap: microseconds
        self._write = threading.Lock()  # keeps batches in order on the stream
        self._pending = threading.Event()
        self._second: tuple[int, str] = (-1, "")  # replaced whole: read by many threads
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._flush_later, name="access-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def write(
        self,
        method: str,
        path: str,
        status: int,
        duration_ms: float,
        client: str | None,
        request_id: str | None,
    ) -> None:
        now = time.time()
        message = f"{method} {path} {status}"
        if self._json:
            line = orjson.dumps(
                {
                    "level": "INFO",
                    "logger": "neardup.access",
                    "message": message,
                    "method": method,
                    "path": path,
                    "status": status,
                    "duration_ms": duration_ms,
                    "client": client,
                    "request_id": request_id,
                    "time": self._iso_time(now),
                }
            ).decode()
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            millis = int(now * 1000) % 1000
            line = f"{stamp},{millis:03d} INFO neardup.access [{request_id}] {message}"
        with self._gather:
            self._lines.append(line + "\n")
            self._size += len(line) + 1
            first, full = len(self._lines) == 1, self._size >= self.flush_bytes
        if full:
            self.flush()
        elif first:
            self._pending.set()  # one wake-up a batch, not one a line

    def _iso_time(self, now: float) -> str:
        """ISO 8601 in UTC with microseconds, as JsonFormatter writes it; the date and
        time of day formatted once a second (datetime's isoformat on every line is not
        needed)."""
        second, prefix = self._second
        if int(now) != second:
            second = int(now)
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, prefix)
        return f"{prefix}.{int((now - second) * 1_000_000):06d}+00:00"

    def flush(self) -> None:
        with self._write:
            with self._gather:
                lines, self._lines, self._size = self._lines, [], 0
            if lines:
                self._stream.write("".join(lines))
                self._stream.flush()

    def close(self) -> None:
        self._closed.set()
        self._pending.set()
        self.flush()

    def _flush_later(self) -> None:
        while not self._closed.is_set():
            self._pending.wait()
            self._pending.clear()
            self._closed.wait(self.flush_seconds)  # gather the batch
            self.flush()


# Set by ``neardup serve`` (use_access_log); None: access lines go through logging.
access_log: AccessLog | None = None


def use_access_log(sink: AccessLog | None) -> None:
    global access_log
    if access_log is not None:
        access_log.close()
    access_log = sink
