"""Document time: timestamps as int64 microseconds since the Unix epoch (UTC).

Microseconds in an int64 keep every ISO 8601 time a client can send exactly (float
seconds lose microseconds past the year 2255) and compare exactly, and span years 1 to
9999 with room to spare. A client sends a time as an ISO 8601 string with a UTC offset or
``Z`` (``2024-05-01T12:00:00+02:00``), or as Unix seconds, a JSON number (``1714557600``,
``1714557600.25``); the service answers ISO 8601 in UTC with ``Z``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], float]  # Unix seconds now (time.time, or a test's fake clock)

MICROSECONDS = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Years 1 to 9999, what an ISO 8601 string can say.
MIN_TIMESTAMP = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
# Integer division: a float quotient rounds the last microsecond of 9999 up into 10000.
MAX_TIMESTAMP = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH) // timedelta(
    microseconds=1
)
# Unix seconds in a query string: an optional sign, digits, an optional fraction.
_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


class BadTime(ValueError):
    """Not a time this service reads; the message says why."""


def now_us(clock: Clock) -> int:
    return round(clock() * MICROSECONDS)


def from_seconds(seconds: float) -> int:
    """Unix seconds (a JSON number) as microseconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise BadTime(f"a time is an ISO 8601 string or Unix seconds, not {seconds!r}")
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise BadTime("a time in Unix seconds must be a finite number")
    # The range first: a huge float times a million is infinite, and round() of it raises.
    if not MIN_TIMESTAMP <= seconds * MICROSECONDS <= MAX_TIMESTAMP:
        raise BadTime(f"{seconds} Unix seconds is outside the years 1 to 9999")
    value = seconds * MICROSECONDS if isinstance(seconds, int) else round(seconds * MICROSECONDS)
    if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise BadTime(f"{seconds} Unix seconds is outside the years 1 to 9999")
    return int(value)


def from_iso(text: str) -> int:
    """An ISO 8601 date and time with a UTC offset or Z, as microseconds."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadTime(
            f"{text!r} is not an ISO 8601 time (like 2024-05-01T12:00:00Z) or Unix seconds"
        ) from None
    if moment.tzinfo is None:
        raise BadTime(f"{text!r} has no UTC offset: add Z or an offset like +02:00")
    value = (moment - EPOCH) // timedelta(microseconds=1)
    if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise BadTime(f"{text!r} is outside the years 1 to 9999 in UTC")
    return value


def parse_time(value: object) -> int:
    """A time as a client sends it in JSON: an ISO 8601 string or Unix seconds."""
    if isinstance(value, str):
        return from_iso(value)
    return from_seconds(value)  # type: ignore[arg-type]


def parse_time_parameter(text: str) -> int:
    """A time in a query string: Unix seconds when it is a plain number, else ISO 8601."""
    if _NUMBER.fullmatch(text):
        return from_seconds(float(text) if "." in text else int(text))
    return from_iso(text)


def iso_time_us(microseconds: int) -> str:
    """ISO 8601 in UTC with Z (microseconds shown when not zero)."""
    moment = EPOCH + timedelta(microseconds=int(microseconds))
    return moment.isoformat().replace("+00:00", "Z")
