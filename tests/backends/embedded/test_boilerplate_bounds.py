"""What a text near very many stored ones costs is bounded, not the count of those:
a site's template around little content, a sentence repeated thousands of times
(app/core/verify.py: MAX_DECIDED_PER_QUERY; app/core/passages.py: SEEDS_PER_KGRAM)."""

from __future__ import annotations

import numpy as np

from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.core.passages import tokenize
from app.service import NewDocument
from app.service.types import PassageMatch
from app.storage import MemoryStore


def _collection() -> Collection:
    store = MemoryStore()
    config = CollectionConfig()
    store.create_collection("c", config.to_dict())
    return Collection("c", config, store)


def test_a_sentence_repeated_thousands_of_times_against_its_copy() -> None:
    """A text of one sentence 5,000 times, stored, then inserted with a word more: the
    insert answers the copy with the whole text as one passage among 31 (the shifts of
    up to 15 sentences each way), not one a shift."""
    text = "the quick brown fox jumps over the lazy dog " * 5000
    collection = _collection()
    collection.insert([NewDocument(text, "first")])
    [result] = collection.insert([NewDocument(text + "end", "second")])
    [match] = [m for m in result.matches if m.id == "first"]
    assert isinstance(match, PassageMatch)
    passages = match.passages
    assert len(passages) == 31
    tokens = tokenize(text)
    whole = (0, int(tokens.ends[-1]), 0, int(tokens.ends[-1]))
    assert whole in {(p.start, p.end, p.match_start, p.match_end) for p in passages}
    assert np.isclose(match.query_coverage, int(tokens.ends[-1]) / len(text + "end"))
