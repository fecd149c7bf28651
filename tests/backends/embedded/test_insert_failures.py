"""An insert batch is queued for the store as soon as its documents' fates are decided,
before its passages are verified (EmbeddedInsert.begin_writing). Where the answers then
fail (a text that cannot be read), memory ends as the store does: the batch stays where
its commit succeeds, as after a crash, and leaves where it fails; no row is numbered
twice, the room reserved in the service's budget is given back, and the next insert goes
on."""

from __future__ import annotations

from typing import Any

import pytest

from app.backends.embedded.collection import Collection
from app.backends.embedded.writes import EmbeddedInsert
from app.collection_config import CollectionConfig
from app.errors import StorageUnavailable, UnknownDocument
from app.service import NewDocument, Query
from app.service.budget import DocumentBudget
from app.storage import MemoryStore
from app.storage.commit import settled
from devkit.corpus import english_like_texts

TEXTS = english_like_texts(21, 6, 1500)


def _ids_in_memory(collection: Collection, ids: list[str]) -> set[str]:
    held = set()
    for document_id in ids:
        try:
            collection.get(document_id)
        except UnknownDocument:
            continue
        held.add(document_id)
    return held


@pytest.mark.parametrize(
    "case", ["queued, its commit succeeds", "queued, its commit fails", "with a retention"]
)
def test_answers_failing_after_the_fates_leave_memory_as_the_store(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a retention may move (here max_documents), the commit waits for the publish
    (its mark commits with the batch): a failure before it stores nothing."""
    commit_fails = case == "queued, its commit fails"
    kept = case == "queued, its commit succeeds"
    store = MemoryStore()
    config = CollectionConfig()
    if case == "with a retention":
        config = CollectionConfig.from_dict(
            {**config.to_dict(), "retention": {"max_documents": 50}}
        )
    store.create_collection("c", config.to_dict())
    budget = DocumentBudget(limit=100)
    collection = Collection("c", config, store, budget=budget)
    collection.insert([NewDocument(TEXTS[0], "first")])

    def unreadable(*args: Any) -> Any:
        raise StorageUnavailable("could not read texts: disk I/O error")

    monkeypatch.setattr(EmbeddedInsert, "stored_passages", unreadable)
    if commit_fails:
        monkeypatch.setattr(
            store, "begin_add_documents", lambda *a: settled(StorageUnavailable("disk full"))
        )
    batch = [NewDocument(text, f"d{i}") for i, text in enumerate(TEXTS[1:4])]
    with pytest.raises(StorageUnavailable):
        collection.insert(batch)
    monkeypatch.undo()

    # The reference: what the store holds, as a restart would load it.
    stored_ids = set(store.load_collection("c").documents.ids)
    asked = ["first", "d0", "d1", "d2"]
    assert stored_ids == (set(asked) if kept else {"first"})
    assert _ids_in_memory(collection, asked) == stored_ids
    assert collection.stats()["documents"] == len(stored_ids) == budget.total
    assert budget.reserve(100) == 100 - len(stored_ids)  # nothing left reserved by the call
    # No commit left for a segment to wait on: a failed one's documents are out again.
    assert collection._writes.commits.unsettled() == []
    budget.release(100 - len(stored_ids))
    collection._check()

    # The next insert numbers its row after the batch's and is answered as usual: the
    # batch's copy is found where the batch stayed.
    [answer] = collection.insert([NewDocument(TEXTS[1], "again")])
    assert not isinstance(answer, Exception)
    assert [m.id for m in answer.matches] == (["d0"] if kept else [])
    assert set(store.load_collection("c").documents.ids) == stored_ids | {"again"}
    found = {m.id for m in collection.search(TEXTS[1], Query(limit=10))}
    assert found == ({"d0", "again"} if kept else {"again"})
    collection._check()
