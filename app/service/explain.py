"""Why a search left a match out (``explain``): the matches a rule refused, with its
reason, the same on every backend.

The one rule that refuses a pair the methods found is the template rule of short texts
(``ngram.same_numbers``, app/core/template.py): two reports of one template that state
other figures. An explained search is the search made twice, with the rule and with it
set aside (``Query.same_numbers``): what only the second finds is what the rule refused,
each with ``differing_numbers``' reason between the query's normalised text and the
stored document's. Exact by construction (the backends' own searches, nothing
re-implemented); it costs a second search and one read per refused match, which is why
it is asked for, not always on.
"""

from __future__ import annotations

import dataclasses

from app.core.template import differing_numbers
from app.core.text import normalize
from app.errors import UnknownDocument
from app.service.protocols import ServiceCollection
from app.service.types import Match, Query


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A document the methods matched and a rule refused: ``methods`` the ones whose match
    it refused (a shared passage is a relation the rule leaves, reported among the
    matches), ``reason`` why, as "numbers differ: 1222 / 1627" (a value of each text the
    other does not state)."""

    id: str
    similarity: float
    methods: tuple[str, ...]
    reason: str


UNKNOWN_FIGURES = "numbers differ"  # the stored text is not kept: no values to show


async def refusals(
    collection: ServiceCollection, text: str, query: Query, kept: list[Match]
) -> list[Refusal]:
    """The matches of ``text`` under ``query`` that the template rule refused (none when
    the collection's rule is off), best first, at most ``query.limit``."""
    ngram = collection.config.ngram
    if not (ngram.enabled and ngram.same_numbers):
        return []
    loose = await collection.search_async(text, dataclasses.replace(query, same_numbers=False))
    kept_methods = {match.id: match.methods for match in kept}
    asked = normalize(text)
    found: list[Refusal] = []
    for match in loose:
        lost = tuple(m for m in match.methods if m not in kept_methods.get(match.id, ()))
        if not lost:
            continue
        try:
            stored = (await collection.get_async(match.id, kept_text=True)).text
        except UnknownDocument:  # deleted between the two searches
            continue
        reason = differing_numbers(asked, normalize(stored)) if stored else None
        found.append(Refusal(match.id, match.similarity, lost, reason or UNKNOWN_FIGURES))
    return found
