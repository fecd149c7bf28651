"""A document appears in and disappears from reads in one step: a search that runs while
an insert or a delete goes through the indexes one by one (reads take no lock) answers
as before the change or as after it, never with a match only some indexes found."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.service import NewDocument, Query
from app.service.types import Match
from app.storage import MemoryStore
from devkit.corpus import english_like_text

STORY = english_like_text(random.Random(5), 3000)
NEAR = STORY.replace(" the ", " a ", 1) + " and one more word"


def answer(collection: Collection, text: str) -> list[Match]:
    return collection.search(text, Query(limit=10))


def observe_between_indexes(
    collection: Collection, method: str, text: str, seen: list[list[Match]]
) -> None:
    """Before each index (and the passage index) takes the change, a search of ``text``."""
    matcher: Any = collection._matcher
    for index in matcher._every_index():
        original: Callable[..., Any] = getattr(index, method)

        def observed(*args: Any, _original: Callable[..., Any] = original) -> Any:
            seen.append(answer(collection, text))
            return _original(*args)

        setattr(index, method, observed)


@pytest.mark.parametrize("passages", [False, True])
def test_searches_between_index_steps_see_all_of_a_change_or_none(passages: bool) -> None:
    config = CollectionConfig.from_dict({"passages": {"enabled": passages}, "store_text": True})
    store = MemoryStore()
    store.create_collection("t", config.to_dict())
    collection = Collection("t", config, store)
    collection.insert([NewDocument(id="other", text=english_like_text(random.Random(9), 300))])
    before = answer(collection, NEAR)
    assert before == []

    seen: list[list[Match]] = []
    observe_between_indexes(collection, "insert", NEAR, seen)
    collection.insert([NewDocument(id="story", text=STORY)])
    after = answer(collection, NEAR)
    # The reference: at rest, the near copy is found by every method that applies.
    assert [m.id for m in after] == ["story"] and {"simhash", "minhash"} <= set(after[0].methods)
    assert len(seen) >= 3, "every index took the insert"
    assert all(during in (before, after) for during in seen), seen

    seen.clear()
    observe_between_indexes(collection, "remove", NEAR, seen)
    collection.delete("story")
    assert answer(collection, NEAR) == before
    assert len(seen) >= 3
    assert all(during == before for during in seen), seen
    collection._check()


@pytest.mark.parametrize("passages", [False, True])
@pytest.mark.parametrize("read", ["search", "similar"])
def test_a_batch_published_while_a_read_runs_is_not_in_its_answer(
    passages: bool, read: str
) -> None:
    """A read looks its indexes up one after another, without a lock: a batch published
    between two of its lookups is found by the later ones only. The read answers as the
    collection stood when it started (its first index looked up before the batch)."""
    config = CollectionConfig.from_dict({"passages": {"enabled": passages}, "store_text": True})
    store = MemoryStore()
    store.create_collection("t", config.to_dict())
    collection = Collection("t", config, store)
    collection.insert([NewDocument(id="near", text=NEAR)])

    def run_read() -> list[Match]:
        if read == "search":
            return answer(collection, NEAR)
        return collection.similar("near", Query(limit=10))

    before = run_read()
    matcher: Any = collection._matcher
    first = matcher.indexes[0]
    original: Callable[..., Any] = first.search_many
    published: list[bool] = []

    def publish_during_the_read(*args: Any) -> Any:
        found = original(*args)
        if not published:  # the read's first lookup is made; the batch goes in now
            published.append(True)
            collection.insert([NewDocument(id="story", text=STORY)])
        return found

    first.search_many = publish_during_the_read
    during = run_read()
    del first.search_many
    assert published
    after = run_read()
    # The reference: the answers at rest, before the batch and after it.
    assert during == before
    assert "story" not in {m.id for m in before}
    assert "story" in {m.id for m in after} and {"simhash", "minhash"} <= set(
        next(m for m in after if m.id == "story").methods
    )
    collection._check()
