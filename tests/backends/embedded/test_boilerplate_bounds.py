"""What a text near very many stored ones costs is bounded, not the count of those:
a site's template around little content, a sentence repeated thousands of times
(app/core/verify.py: MAX_DECIDED_PER_QUERY; app/core/passages.py: SEEDS_PER_KGRAM)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import app.core.verify as verify
from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.core.passages import tokenize
from app.service import NewDocument, Query
from app.service.types import PassageMatch
from app.storage import MemoryStore
from devkit.corpus import english_like_texts


def _collection() -> Collection:
    store = MemoryStore()
    config = CollectionConfig()
    store.create_collection("c", config.to_dict())
    return Collection("c", config, store)


def test_a_search_near_every_page_of_a_site_shingles_a_bounded_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """150 pages: one template of 300 words around 100 words of their own. The template
    alone is near every page (exact Jaccard ~0.74, estimates around the 0.8 bar): the
    search shingles its own text and at most MAX_DECIDED_PER_QUERY stored ones (32 here), and
    answers the pages that a search asking for all of them (each pair decided by the
    texts) answers first."""
    [template] = english_like_texts(5, 1, 3000)
    words = template.split()[:300]
    pages = [" ".join(words + body.split()[:100]) for body in english_like_texts(6, 150, 1000)]
    collection = _collection()
    collection.insert([NewDocument(page, f"p{i}") for i, page in enumerate(pages)])
    shingled: list[str] = []
    original = verify.shingle_sets

    def counted(texts: Sequence[str], params: verify.FingerprintParams) -> list[verify.ShingleSet]:
        shingled.extend(texts)
        return original(texts, params)

    monkeypatch.setattr(verify, "shingle_sets", counted)
    monkeypatch.setattr(verify, "MAX_DECIDED_PER_QUERY", 32)  # fewer pages than the real one
    query, bound = " ".join(words), 32
    matches = collection.search(query, Query(limit=20))
    assert 1 < len(shingled) <= 1 + bound
    assert len(set(shingled) - {query}) >= bound, "a weak test"
    shingled.clear()  # asking for every page: each pair is decided by the texts, as before
    everything = collection.search(query, Query(limit=len(pages)))
    assert len(shingled) > 3 * bound
    assert [m.id for m in matches] == [m.id for m in everything][:20] and matches


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
