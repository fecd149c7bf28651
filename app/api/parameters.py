"""The query-string parameters of the GET routes that match (search, similar), declared
once: what each takes and the 400 a bad value gets."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

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
        description="Matches found by shared passages alone: the larger of query_coverage "
        "and match_coverage at least this.",
    ),
]


def search_query(
    limit: int,
    max_distance: int | None,
    min_similarity: float | None,
    since: int | None,
    until: int | None,
    min_coverage: float | None,
) -> SearchQuery:
    return SearchQuery(limit, max_distance, min_similarity, since, until, min_coverage)
