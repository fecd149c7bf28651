"""Logging: one JSON object per line (or plain text), each carrying the request id.

The request id lives in a context variable set by RequestIdMiddleware; a filter copies it
onto every record, so log lines from handlers, the thread pool and the service layer of
one request share it without passing it around.
"""

from __future__ import annotations

import logging
import logging.config
from contextvars import ContextVar
from typing import Any, Literal

from pythonjsonlogger.core import RESERVED_ATTRS

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

JSON_FIELDS = ("levelname", "name", "message")
# uvicorn's terminal-coloured copy of its message is noise in a JSON line.
SKIPPED_ATTRIBUTES = [*RESERVED_ATTRS, "color_message"]


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def logging_config(level: str, style: Literal["json", "text"]) -> dict[str, Any]:
    """A dictConfig for the service and uvicorn's own loggers."""
    if style == "json":
        formatter: dict[str, Any] = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": list(JSON_FIELDS),
            "rename_fields": {"levelname": "level", "name": "logger"},
            "reserved_attrs": SKIPPED_ATTRIBUTES,
            "timestamp": "time",
            "json_ensure_ascii": False,
        }
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
