"""Verifying only the candidates that can pass (app/core/passages.py ``may_cover``) changes
no answer: every insert's ``contains`` / ``contained_in`` and every search's passage
matches at a ``min_coverage`` are those of a brute force that verifies the new text
against every earlier document (no index, no candidates, no filter), on planted
containments, roundups, partial quotes, near-duplicates and a footer common enough to be
boilerplate, inserted one by one and in batches."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.core.passages import Candidates, coverage, shared_passages, tokenize
from app.service import NewDocument, Query
from app.service.passages import CONTAINED
from app.service.types import InsertResult
from app.storage import MemoryStore
from devkit.corpus import english_like_text, mutate_words

FOOTER = "Subscribe to our newsletter for the latest market news and analysis every morning."


def _corpus(seed: int) -> list[str]:
    """Stories, and texts made of them: roundups, a story inside other prose, a quote of
    part of one, an edited copy, one with a footer that 80 documents end with."""
    rng = random.Random(seed)
    stories = [english_like_text(rng, rng.randint(300, 1500)) for _ in range(60)]
    texts: list[str] = []
    for at in range(160):
        roll = rng.random()
        story = rng.choice(stories)
        if roll < 0.25:
            texts.append(story)
        elif roll < 0.45:
            texts.append("\n\n".join(rng.sample(stories, rng.randint(2, 5))))
        elif roll < 0.6:
            words = story.split()
            start = rng.randrange(len(words) // 2)
            quote = " ".join(words[start : start + rng.randint(12, len(words) - start)])
            texts.append(f"{english_like_text(rng, 400)} {quote} {english_like_text(rng, 300)}")
        elif roll < 0.75:
            texts.append(mutate_words(rng, story, 0.03))
        else:
            texts.append(english_like_text(rng, rng.randint(200, 1200)))
        if at % 2 == 0:
            texts[-1] += " " + FOOTER
    return texts


def _coverages(text: str, earlier: str) -> tuple[float, float]:
    passages = shared_passages(tokenize(text), tokenize(earlier))
    return coverage(passages, len(text)), coverage(passages, len(earlier), of_match=True)


def _collection() -> Collection:
    config = CollectionConfig()
    store = MemoryStore()
    store.create_collection("c", config.to_dict())
    return Collection("c", config, store)


@pytest.mark.parametrize("seed", range(3))
def test_insert_relations_are_those_of_every_earlier_document(seed: int) -> None:
    texts = _corpus(seed)
    collection = _collection()
    rng = random.Random(seed)
    results: list[InsertResult] = []
    at = 0
    while at < len(texts):
        size = rng.choice([1, 1, 3, 12])
        chunk = texts[at : at + size]
        answers = collection.insert([NewDocument(t, f"d{at + i}") for i, t in enumerate(chunk)])
        results += [a for a in answers if isinstance(a, InsertResult)]
        at += size
        if collection.needs_merge():
            collection.merge()
    assert len(results) == len(texts)
    checked = 0
    for number, (text, result) in enumerate(zip(texts, results, strict=True)):
        near = {m.id for m in result.matches}
        contains, contained_in = set(), set()
        for before in range(number):
            query_share, match_share = _coverages(text, texts[before])
            if f"d{before}" in near:
                continue
            if match_share >= CONTAINED:
                contains.add(f"d{before}")
            if query_share >= CONTAINED:
                contained_in.add(f"d{before}")
        assert result.contains is not None and result.contained_in is not None
        assert {m.id for m in result.contains} == contains, number
        assert {m.id for m in result.contained_in} == contained_in, number
        checked += len(contains) + len(contained_in)
    assert checked > 40  # the corpus holds containments to find


@pytest.mark.parametrize("bar", [0.3, 0.5, 0.8])
def test_search_at_a_min_coverage_finds_what_every_document_would(bar: float) -> None:
    texts = _corpus(7)
    collection = _collection()
    for at in range(0, len(texts), 40):
        chunk = texts[at : at + 40]
        collection.insert([NewDocument(t, f"d{at + i}") for i, t in enumerate(chunk)])
    rng = random.Random(8)
    found = 0
    for text in rng.sample(texts, 40):
        answer = collection.search(text, Query(limit=100, min_coverage=bar))
        alone = {m.id for m in answer if m.methods == ("passage",)}
        near = {m.id for m in answer if m.methods != ("passage",)}
        expected = set()
        for number, stored in enumerate(texts):
            if f"d{number}" in near:
                continue
            query_share, match_share = _coverages(text, stored)
            if max(query_share, match_share) >= bar:
                expected.add(f"d{number}")
        assert alone == expected
        found += len(expected)
    assert found > 20


def test_an_insert_batch_reads_its_candidates_texts_at_once() -> None:
    """``read_ahead`` reads every candidate text of a batch in one read, and ``find``
    then finds what it finds reading each query's candidates itself, reading nothing
    more (copies, which need no text, are not read)."""
    from app.backends.embedded.passages import PassageSearch
    from app.service.passages import PassageQuery

    texts = _corpus(5)
    stored, asked = texts[:100], texts[100:] + texts[:3]  # the last three: copies
    reads: list[list[int]] = []

    def texts_of(rows: list[int]) -> list[str | None]:
        reads.append(list(rows))
        return [stored[row] for row in rows]

    config = CollectionConfig().passages
    search = PassageSearch(config, texts_of)
    search.insert(stored, np.arange(len(stored), dtype=np.int64))
    queries = [PassageQuery.of(text, 0, config) for text in asked]
    found = search.counted_candidates([q.keys for q in queries], CONTAINED)

    def answers(candidates: list[Candidates]) -> list[list[tuple[str | None, int, int]]]:
        return [
            [(f.document_id, f.match_length, len(f.passages)) for f in finds]
            for finds in (
                search.find(q, lambda rows: np.ones(len(rows), dtype=np.bool_), str, int, c)
                for q, c in zip(queries, candidates, strict=True)
            )
        ]

    expected = answers(found)
    reads.clear()
    ahead = search.read_ahead(queries, found)
    assert len(reads) == 1
    wanted = {  # each query's first 32 candidates but its copies
        row
        for q, c in zip(queries, found, strict=True)
        for row in c.rows.tolist()[:32]
        if stored[row] != q.text
    }
    assert set(reads[0]) == wanted
    assert answers(ahead) == expected
    assert len(reads) == 1  # find read nothing more
    assert sum(len(finds) for finds in expected) > 20  # the batch shares passages
