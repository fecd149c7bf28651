"""The checks of a search's options and the Match answers of what matched, the same on
every backend."""

from __future__ import annotations

from collections.abc import Callable

from app.core.methods import METHODS_OF_BITS
from app.core.rule import Pairs
from app.errors import InvalidParameter
from app.service.types import Match, Query, check_range


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


def matches_of(
    pairs: Pairs, span: tuple[int, int], limit: int, id_of: Callable[[int], str | None]
) -> list[Match]:
    """The Match answers of pairs[span], at most ``limit``; rows whose id is None (evicted
    since the search found them) are left out. O(limit)."""
    start, end = span[0], min(span[1], span[0] + limit)
    if start == end:
        return []  # most inserted documents: nothing to build
    matches = []
    for row, similarity, distance, bits in zip(
        pairs.rows[start:end].tolist(),
        pairs.similarity[start:end].tolist(),
        pairs.distances[start:end].tolist(),
        pairs.methods[start:end].tolist(),
        strict=True,
    ):
        document_id = id_of(row)
        if document_id is not None:
            matches.append(Match(document_id, similarity, distance, METHODS_OF_BITS[bits]))
    return matches
