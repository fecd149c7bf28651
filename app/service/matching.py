"""The checks of a search's options, the same on every backend."""

from __future__ import annotations

from app.errors import InvalidParameter
from app.service.types import Query, check_range


def check_query(query: Query, max_distance: int) -> None:
    """A search's options against the collection's SimHash distance (both backends)."""
    if query.max_distance is not None and not 0 <= query.max_distance <= max_distance:
        raise InvalidParameter(
            f"max_distance must be between 0 and the collection's max_distance "
            f"{max_distance}, not {query.max_distance}"
        )
    if query.min_similarity is not None and not 0.0 <= query.min_similarity <= 1.0:
        raise InvalidParameter(f"min_similarity must be 0 to 1, not {query.min_similarity}")
    if query.limit < 1:
        raise InvalidParameter(f"limit must be at least 1, not {query.limit}")
    check_range(query.since, query.until)
