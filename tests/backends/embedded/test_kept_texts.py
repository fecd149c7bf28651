"""Kept texts off the heap (app/backends/embedded/texts.py): a text is readable from the
moment its row is published, from memory while its commit is not durable and from the
store once it is; nothing is held past its commit; a collection over a store whose
commits wait still verifies passages against the documents queued before."""

from __future__ import annotations

import threading

import numpy as np

from app.backends.embedded.collection import Collection
from app.backends.embedded.texts import KeptTexts, RecentTexts
from app.collection_config import CollectionConfig
from app.service import NewDocument, Query
from app.storage import MemoryStore
from app.storage.base import DocumentBatch, Mark
from app.storage.commit import Commit, settle
from devkit.corpus import english_like_texts


def test_held_until_the_commit_settles_then_read_from_the_store() -> None:
    stored: dict[int, str] = {}
    reads: list[list[int]] = []

    def read(rows: list[int]) -> list[str | None]:
        reads.append(rows)
        return [stored.get(row) for row in rows]

    texts = KeptTexts(read, RecentTexts(0))  # no recent texts: every settled one is read
    commit = Commit()
    texts.hold(np.array([4, 5, 6]), ["four", None, "six"])
    assert texts.many([4, 6]) == ["four", "six"] and reads == []  # before until: held
    texts.until(commit)
    assert texts.many([6, 4]) == ["six", "four"] and reads == []
    assert texts.many([5]) == [None] and reads == [[5]]  # no text kept: asked of the store
    stored.update({4: "four", 6: "six"})
    settle([(commit, None)])
    assert texts.many([4, 6, 7]) == ["four", "six", None]
    assert reads[-1] == [4, 6, 7] and texts.held == 0
    texts._check()


def test_recent_texts_are_kept_up_to_their_bound_least_recently_used_out_first() -> None:
    stored = {row: "x" * size for row, size in {1: 4, 2: 4, 3: 4, 4: 3, 5: 5}.items()}
    reads: list[list[int]] = []

    def read(rows: list[int]) -> list[str | None]:
        reads.append(rows)
        return [stored.get(row) for row in rows]

    recent = RecentTexts(10)
    texts = KeptTexts(read, recent)
    committed = Commit()
    texts.hold(np.array([1, 2]), [stored[1], stored[2]])
    texts.until(committed)
    settle([(committed, None)])
    assert texts.many([1, 2]) == [stored[1], stored[2]] and reads == []  # inserted: recent
    assert texts.many([3]) == [stored[3]] and reads == [[3]]  # read once, then recent
    # 12 characters past 10: the least recently used (row 1; 2 and 3 were used after it)
    # goes, and the cache holds 2 and 3 (8 characters).
    assert recent.chars == 8
    assert texts.many([2, 3]) == [stored[2], stored[3]] and reads == [[3]]
    assert texts.many([1]) == [stored[1]] and reads == [[3], [1]]  # let go: read again
    texts._check()
    # A released row is never answered from the cache; a failed commit's texts never enter.
    texts.release(np.array([3]))
    del stored[3]
    assert texts.many([3]) == [None]
    failed = Commit()
    texts.hold(np.array([5]), [stored[5]])
    texts.until(failed)
    settle([(failed, RuntimeError("disk full"))])
    del stored[5]
    assert texts.many([5]) == [None]
    # A text longer than the whole bound is read each time, never cached.
    stored[6] = "y" * 11
    texts.many([6])
    texts.many([6])
    assert reads[-2:] == [[6], [6]]
    texts._check()
    # Another collection's texts share the bound and never answer for this one's rows.
    other = KeptTexts(lambda rows: ["z" * 9 for _ in rows], recent)
    assert other.many([1]) == ["z" * 9]  # its row 1, not this one's
    assert texts.many([1]) == [stored[1]] and reads[-1] == [1]  # pushed out: read again
    assert recent.chars <= 10
    other._check()


def test_a_failed_commit_and_a_release_hold_nothing() -> None:
    texts = KeptTexts(lambda rows: [None] * len(rows))
    failed, pending = Commit(), Commit()
    texts.hold(np.array([1]), ["one"])
    texts.until(failed)
    texts.hold(np.array([2, 3]), ["two", "three"])
    texts.until(pending)
    settle([(failed, RuntimeError("disk full"))])
    assert texts.many([1, 2]) == [None, "two"]
    texts.release(np.array([2]))
    assert texts.many([2, 3]) == [None, "three"] and texts.held == 1
    texts.hold(np.array([8]), ["eight"])
    texts.until(None)  # durable already (a replacement's synchronous commit)
    assert texts.held == 1
    texts._check()


class _Watched(Commit):
    """A commit that tells when a thread first waits on it: an insert waits on its
    commit once it has published its documents (the commit may be queued before)."""

    __slots__ = ("waited",)

    def __init__(self, waited: threading.Event) -> None:
        super().__init__()
        self.waited = waited

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.waited.set()
        return super().exception(timeout)


class _HeldCommits(MemoryStore):
    """Commits that become durable only when the test says (documents stored at once,
    the commit settled later), as a slow disk's group commit."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[Commit] = []
        self.waited = threading.Event()  # set once an insert waits on its commit

    def begin_add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> Commit:
        commit = _Watched(self.waited)
        self.waiting.append(commit)
        self.hidden = (name, documents, mark)  # not readable until released
        return commit

    def release(self) -> None:
        name, documents, mark = self.hidden
        self.add_documents(name, documents, mark)
        settle([(commit, None) for commit in self.waiting])
        self.waiting.clear()


def test_a_search_before_the_commit_verifies_against_the_queued_texts() -> None:
    store = _HeldCommits()
    config = CollectionConfig()
    store.create_collection("c", config.to_dict())
    collection = Collection("c", config, store)
    story, other = english_like_texts(3, 2, 1500)
    # The insert blocks on its commit: run it in a thread and search while it waits.
    done = threading.Event()
    inserting = threading.Thread(
        target=lambda: (collection.insert([NewDocument(story, "story")]), done.set())
    )
    inserting.start()
    roundup = f"{other}\n\n{story}"
    assert store.waited.wait(10)  # published, waiting on its commit, not durable
    assert store.read_texts("c", [0]) == [None]  # not in the store yet
    [match] = collection.search(roundup, Query(limit=5))
    assert match.id == "story" and "passage" in match.methods
    assert not done.is_set()
    store.release()
    inserting.join(10)
    assert done.is_set() and store.read_texts("c", [0]) == [story]
    [again] = collection.search(roundup, Query(limit=5))
    assert again == match


def test_a_pinned_text_outlives_the_store_until_released() -> None:
    stored = {3: "three", 4: "four"}
    texts = KeptTexts(lambda rows: [stored.get(row) for row in rows])
    texts.pin([3, 5])
    stored.clear()  # the store's delete commits first
    assert texts.many([3, 4, 5]) == ["three", None, None]
    texts._check()
    texts.release(np.array([3, 5]))
    assert texts.many([3]) == [None] and texts.held == 0
    texts._check()


class _SlowDeletes(MemoryStore):
    """Deletes that are durable at once but return only when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted = threading.Event()
        self.go_on = threading.Event()

    def delete_documents(self, name: str, rows: list[int]) -> None:
        super().delete_documents(name, rows)
        self.deleted.set()
        assert self.go_on.wait(10)


def test_a_document_being_deleted_is_still_verified_by_a_search() -> None:
    store = _SlowDeletes()
    config = CollectionConfig()
    store.create_collection("c", config.to_dict())
    collection = Collection("c", config, store)
    story, other = english_like_texts(4, 2, 1500)
    collection.insert([NewDocument(story, "story")])
    roundup = f"{other}\n\n{story}"
    [before] = collection.search(roundup, Query(limit=5))
    deleting = threading.Thread(target=collection.delete, args=("story",))
    deleting.start()
    assert store.deleted.wait(10)
    assert store.read_texts("c", [0]) == [None]  # gone from the store, still indexed
    assert collection.search(roundup, Query(limit=5)) == [before]
    store.go_on.set()
    deleting.join(10)
    assert collection.search(roundup, Query(limit=5)) == []
    collection._check()
