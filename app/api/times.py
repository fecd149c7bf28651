"""Times in query strings (since, until): Unix seconds, or ISO 8601 with an offset or Z."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import BeforeValidator

from app.service.times import BadTime, parse_time_parameter


def _time_parameter(value: object) -> int | None:
    if value is None:
        return None
    try:
        return parse_time_parameter(str(value))
    except BadTime as error:
        raise ValueError(str(error)) from None


# A bad value is a 400 invalid_parameter naming it, like every query parameter.
TimeParameter = Annotated[
    int | None,
    BeforeValidator(_time_parameter),
    Query(
        description="Unix seconds, or ISO 8601 with a UTC offset or Z (a + in an offset is "
        "%2B in a URL)",
        json_schema_extra={"type": "string"},
    ),
]
