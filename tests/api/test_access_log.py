"""The buffered access log writes the lines the logging path writes, in order, and loses
none at close."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from app import logs
from app.api.request_id import log_request


class Stream(io.StringIO):
    """Records each write; ``written`` is set by the first."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.written = threading.Event()

    def write(self, text: str) -> int:
        self.writes += 1
        self.written.set()
        return super().write(text)


SCOPE = {"method": "POST", "path": "/v1/collections/news/search", "client": ("10.0.0.7", 5)}


def _through_logging(style: str) -> str:
    """The line the logging configuration itself writes for a request."""
    stream = io.StringIO()
    config = logs.logging_config("info", style)  # type: ignore[arg-type]
    config["handlers"]["default"]["stream"] = stream
    logging.config.dictConfig(config)
    token = logs.request_id.set("crawler-1")
    try:
        log_request(SCOPE, 200, 0.0)
    finally:
        logs.request_id.reset(token)
        logging.config.dictConfig(logs.logging_config("warning", "json"))
    return stream.getvalue()


@pytest.mark.parametrize("style", ["json", "text"])
def test_the_buffered_line_is_the_logging_line(style: str) -> None:
    expected = _through_logging(style)
    stream = Stream()
    sink = logs.AccessLog(stream, style)  # type: ignore[arg-type]
    logs.use_access_log(sink)
    token = logs.request_id.set("crawler-1")
    try:
        log_request(SCOPE, 200, 0.0)
    finally:
        logs.request_id.reset(token)
        logs.use_access_log(None)  # closes: flushes
    got = stream.getvalue()
    if style == "json":
        line, reference = json.loads(got), json.loads(expected)
        assert line.keys() == reference.keys()
        for key in ("time", "duration_ms"):  # each its own moment
            del line[key], reference[key]
        assert line == reference
    else:
        # Time first, then the same words: "INFO neardup.access [crawler-1] POST ... 200".
        assert got.split(" ", 2)[2] == expected.split(" ", 2)[2]


def test_lines_come_in_order_in_few_writes_and_none_is_lost() -> None:
    stream = Stream()
    sink = logs.AccessLog(stream, "json", flush_seconds=3600, flush_bytes=10_000)
    threads = [
        threading.Thread(
            target=lambda t=t: [
                sink.write("GET", f"/{t}/{n}", 200, 0.1, None, None) for n in range(500)
            ]
        )
        for t in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.close()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2_000
    for t in range(4):  # each thread's lines in the order it wrote them
        assert [line["path"] for line in lines if line["path"].startswith(f"/{t}/")] == [
            f"/{t}/{n}" for n in range(500)
        ]
    assert 2_000 * 150 // 10_000 <= stream.writes <= 2_000 // 10  # batches, not lines


def test_a_quiet_service_still_writes_its_lines_soon() -> None:
    stream = Stream()
    sink = logs.AccessLog(stream, "text", flush_seconds=0.05)
    sink.write("GET", "/healthz", 200, 0.1, None, None)
    assert stream.written.wait(10), "the line was never written"
    assert "/healthz 200" in stream.getvalue()
    sink.close()


def test_the_time_is_the_iso_time_of_the_line() -> None:
    stream = Stream()
    sink = logs.AccessLog(stream, "json", flush_seconds=3600)
    before = datetime.now(UTC)
    for _ in range(3):
        sink.write("GET", "/healthz", 200, 0.1, None, None)
    after = datetime.now(UTC)
    sink.close()
    for line in stream.getvalue().splitlines():
        stamp = datetime.fromisoformat(json.loads(line)["time"])
        assert before - timedelta(microseconds=1) <= stamp <= after  # truncated, not rounded
