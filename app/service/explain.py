"""Why a search left a match out (``explain``): the matches a rule refused, with its
reason, the same on every backend.

Two rules refuse pairs the methods found:

- the template rule of short texts (``ngram.same_numbers``, app/core/template.py): two
  reports of one template that state other figures; the reason is ``differing_numbers``'
  between the query's normalised text and the stored document's;
- MinHash decided by the texts (``minhash.exact``, app/core/verify.py): a candidate whose
  estimate reached the threshold and whose exact Jaccard did not; the reason gives both.

An explained search is the search made twice, with the rules and with them set aside
(``Query.same_numbers``, ``Query.exact_minhash``): what only the second finds is what the
rules refused. Exact by construction (the backends' own searches, nothing
re-implemented); it costs a second search and one read per refused match, which is why
it is asked for, not always on.
"""

from __future__ import annotations

import dataclasses

from app.core.template import differing_numbers
from app.core.text import normalize
from app.core.verify import ShingleSet, search_bar, set_jaccard, shingle_set
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
    collection: ServiceCollection,
    text: str,
    query: Query,
    kept: list[Match],
    similar_to: str | None = None,
) -> list[Refusal]:
    """The matches of ``text`` under ``query`` (with ``similar_to``, of that stored
    document, whose text ``text`` is, "" when not kept) that a rule refused (none when
    the collection's rules are off), best first, at most ``query.limit``."""
    config = collection.config
    if not (config.ngram.enabled and config.ngram.same_numbers) and not config.verifies_exactly:
        return []
    loose_query = dataclasses.replace(query, same_numbers=False, exact_minhash=False)
    if similar_to is None:
        loose = await collection.search_async(text, loose_query)
    else:
        loose = await collection.similar_async(similar_to, loose_query)
    kept_methods = {match.id: match.methods for match in kept}
    asked = normalize(text)
    params = config.fingerprint_params
    asked_set: ShingleSet | None = None  # made for the first MinHash refusal
    found: list[Refusal] = []
    for match in loose:
        lost = tuple(m for m in match.methods if m not in kept_methods.get(match.id, ()))
        if not lost:
            continue
        try:
            stored = (await collection.get_async(match.id, kept_text=True)).text
        except UnknownDocument:  # deleted between the two searches
            continue
        reasons = []
        if "ngram" in lost:
            figures = differing_numbers(asked, normalize(stored)) if stored else None
            reasons.append(figures or UNKNOWN_FIGURES)
        if "minhash" in lost:
            bar = search_bar(config.minhash.threshold, query.min_similarity)
            if asked_set is None:
                asked_set = shingle_set(text, params)
            exact = set_jaccard(asked_set, shingle_set(stored or "", params))
            reasons.append(
                f"Jaccard {exact:.3f} below the threshold {bar:g} (estimate {match.similarity:.3f})"
            )
        found.append(Refusal(match.id, match.similarity, lost, "; ".join(reasons)))
    return found
