"""The query-string parameters of the GET routes that match (search, similar), declared
once: what each takes and the 400 a bad value gets."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.api.times import TimeParameter
from app.service.types import DEFAULT_MIN_COVERAGE, MIN_COVERAGE_DESCRIPTION
from app.service.types import Query as SearchQuery

Limit = Annotated[int, Query(ge=1)]
MinSimilarity = Annotated[float | None, Query(ge=0.0, le=1.0, allow_inf_nan=False)]
MaxDistance = Annotated[int | None, Query(ge=0)]
MinCoverage = Annotated[
    float | None,
    Query(
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description=MIN_COVERAGE_DESCRIPTION,
    ),
]


class MatchFilters:
    """The query-string filters of the GET routes that match (search, similar): a
    FastAPI dependency, its parameters declared once."""

    def __init__(
        self,
        limit: Limit = 10,
        min_similarity: MinSimilarity = None,
        max_distance: MaxDistance = None,
        since: TimeParameter = None,
        until: TimeParameter = None,
        min_coverage: MinCoverage = None,
    ) -> None:
        self.limit = limit
        self.query = search_query(limit, max_distance, min_similarity, since, until, min_coverage)


def search_query(
    limit: int,
    max_distance: int | None,
    min_similarity: float | None,
    since: int | None,
    until: int | None,
    min_coverage: float | None,
) -> SearchQuery:
    coverage = DEFAULT_MIN_COVERAGE if min_coverage is None else min_coverage
    return SearchQuery(limit, max_distance, min_similarity, since, until, coverage)
