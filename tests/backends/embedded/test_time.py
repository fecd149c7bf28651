"""Document time, match windows, since / until, retention and limits against a brute-force
model (tests/time_model.py), with a fake clock: inserts with timestamps in and out of
order, windows, filters, expiry by age and by count, eviction at any moment, restarts."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig, LimitsConfig, RetentionConfig
from app.errors import UnknownDocument
from app.service import InsertOptions, InsertResult, NewDocument, Query, Refused
from app.service.budget import DocumentBudget
from app.service.times import iso_time_us
from app.storage import MemoryStore
from app.storage.base import Store
from app.storage.sqlite import SQLiteStore
from devkit.corpus import english_like_text
from tests.time_model import Expected, FakeClock, Model

HOUR = 3600 * 1_000_000
STORIES = [english_like_text(random.Random(1000 + i), 600) for i in range(12)]


def open_collection(
    store: Store, config: CollectionConfig, clock: FakeClock, budget: DocumentBudget | None = None
) -> Collection:
    """The collection ``t`` of a store, restored as the service restores it at a start."""
    stored = {s.name: s for s in store.load()}
    if "t" not in stored:
        store.create_collection("t", config.to_dict())
        return Collection("t", config, store, clock=clock, budget=budget)
    collection = Collection(
        "t", CollectionConfig.from_dict(stored["t"].config), store, clock=clock, budget=budget
    )
    collection.restore(stored["t"])
    return collection


def answer_of(result: InsertResult | Refused) -> Expected:
    if isinstance(result, Refused):
        return Expected(result.id or "", False, [], None, None, result.error.code)
    return Expected(
        result.id,
        result.inserted,
        [m.id for m in result.matches],
        result.cluster_id,
        result.duplicate_of,
    )


def check_against(collection: Collection, model: Model, clock: FakeClock) -> None:
    """Every visible document, and only those, with its cluster; the counts."""
    now = clock.us
    model.expire(now)
    visible = model.visible(now)
    assert collection.stats()["documents"] == len(visible)
    assert collection.stats()["duplicates"] == model.duplicates(now)
    for doc in visible:
        stored = collection.get(doc.id)
        assert stored.timestamp == iso_time_us(doc.ts)
        assert stored.cluster_id == model.docs[doc.cluster].id
    for doc in model.docs:
        if doc.state != "live" or doc not in visible:
            with pytest.raises(Exception, match="does not exist"):
                collection.get(doc.id)
    collection._check()


def run_scenario(
    seed: int, config: CollectionConfig, store: Store, steps: int = 160, restart_every: int = 0
) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    model = Model(
        window=config.match_window_us,
        max_age=config.retention.max_age_us,
        max_kept=config.retention.max_documents,
        limit=config.limits.max_documents,
    )
    collection = open_collection(store, config, clock)
    number = 0
    for step in range(steps):
        action = rng.random()
        now = clock.us
        if action < 0.45:
            size = rng.choice([1, 1, 2, 5, 9])
            batch = []
            for _ in range(size):
                # Around now, out of order, sometimes long ago or ahead.
                offset = rng.choice([0, 0, -1, 1, -3, -30, 2]) * rng.random() * HOUR
                batch.append((f"d{number}", rng.randrange(len(STORIES)), int(now + offset)))
                number += 1
            since = until = None
            if rng.random() < 0.2:
                since = now - rng.randint(0, 4) * HOUR
                until = since + rng.randint(1, 6) * HOUR
            skip = rng.random() < 0.2
            results = collection.insert(
                [NewDocument(STORIES[story], i, None, ts) for i, story, ts in batch],
                InsertOptions("skip" if skip else "insert", since=since, until=until),
            )
            expected = model.insert(batch, now, since, until, skip)
            assert [answer_of(r) for r in results] == expected, f"step {step}"
        elif action < 0.6:
            clock.advance(rng.choice([1, 60, 600, 1800, 5400]))
        elif action < 0.7 and model.docs:
            doc = rng.choice(model.docs)
            present = model.delete(doc.id, now)
            try:
                collection.delete(doc.id)
                assert present, f"{doc.id} deleted but expired or gone"
            except Exception as error:
                assert not present and "does not exist" in str(error)
        elif action < 0.85:
            story = rng.randrange(len(STORIES))
            since = now - rng.randint(0, 5) * HOUR if rng.random() < 0.5 else None
            until = now - rng.randint(-1, 3) * HOUR if rng.random() < 0.5 else None
            if since is not None and until is not None and since > until:
                since, until = until, since
            limit = rng.choice([1, 3, 100])
            query = Query(limit=limit, since=since, until=until)
            found = [m.id for m in collection.search(STORIES[story], query)]
            model.expire(now)
            assert found == model.search(story, now, since, until, limit), f"step {step}"
        elif action < 0.95:
            collection.evict(rng.choice([1, 3, 1000]))
        else:
            check_against(collection, model, clock)
        if restart_every and step % restart_every == restart_every - 1:
            collection.flush()
            collection = open_collection(store, config, clock)
    check_against(collection, model, clock)
    while collection.evict():
        pass
    check_against(collection, model, clock)


CONFIGS = {
    "window": CollectionConfig(match_window="2h"),
    "age": CollectionConfig(retention=RetentionConfig(max_age="3h")),
    "count": CollectionConfig(retention=RetentionConfig(max_documents=25)),
    "everything": CollectionConfig(
        match_window="90m", retention=RetentionConfig(max_age="5h", max_documents=30)
    ),
    "limit": CollectionConfig(limits=LimitsConfig(max_documents=20)),
    "limit and age": CollectionConfig(
        match_window="1h",
        retention=RetentionConfig(max_age="2h"),
        limits=LimitsConfig(max_documents=15),
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("seed", [1, 2])
def test_inserts_searches_and_expiry_answer_as_the_model(name: str, seed: int) -> None:
    run_scenario(seed, CONFIGS[name], MemoryStore())


@pytest.mark.parametrize("name", ["count", "everything", "limit and age"])
def test_restarts_bring_back_exactly_what_was_visible(name: str, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", "NORMAL")
    try:
        run_scenario(7, CONFIGS[name], store, steps=140, restart_every=23)
    finally:
        store.close()


def test_a_batch_matches_within_the_window_of_each_document() -> None:
    clock = FakeClock()
    config = CollectionConfig(match_window="1h")
    collection = open_collection(MemoryStore(), config, clock)
    now = clock.us
    story = STORIES[0]
    results = collection.insert(
        [
            NewDocument(story, "a", None, now),
            NewDocument(story, "b", None, now + 2 * HOUR),  # too late for a
            NewDocument(story, "c", None, now + HOUR),  # within an hour of both
            NewDocument(story, "d", None, now - HOUR - 1),  # one microsecond too early
        ]
    )
    assert [[m.id for m in r.matches] for r in results if isinstance(r, InsertResult)] == [
        [],
        [],
        ["a", "b"],
        [],
    ]


def test_the_filters_apply_before_the_limit() -> None:
    """Fifty copies, the newest first in row order: a limit of 3 within a range returns
    the first three of that range, never fewer because older rows came first."""
    clock = FakeClock()
    collection = open_collection(MemoryStore(), CollectionConfig(), clock)
    now = clock.us
    collection.insert([NewDocument(STORIES[1], f"x{i}", None, now - i * HOUR) for i in range(50)])
    found = collection.search(STORIES[1], Query(limit=3, since=now - 42 * HOUR, until=now))
    assert [m.id for m in found] == ["x0", "x1", "x2"]
    found = collection.search(STORIES[1], Query(limit=3, until=now - 40 * HOUR))
    assert [m.id for m in found] == ["x40", "x41", "x42"]
    similar = collection.similar(
        "x45", Query(limit=100, since=now - 47 * HOUR, until=now - 40 * HOUR)
    )
    assert [m.id for m in similar] == ["x40", "x41", "x42", "x43", "x44", "x46", "x47"]


def test_eviction_gives_back_memory_by_pages() -> None:
    """A stream with a count retention holds its signature memory flat: the pages of
    evicted rows are given back."""
    clock = FakeClock()
    config = CollectionConfig(retention=RetentionConfig(max_documents=2000))
    collection = open_collection(MemoryStore(), config, clock)
    rng = random.Random(3)
    texts = [english_like_text(rng, 300) for _ in range(200)]
    sizes = []
    for batch in range(60):
        now = clock.us
        documents = [
            NewDocument(f"{texts[(batch * 7 + i) % 200]} {batch} {i}", None, None, now + i)
            for i in range(256)
        ]
        collection.insert(documents)
        while collection.evict():
            pass
        clock.advance(1)
        lsh = collection._matcher.lsh
        assert lsh is not None
        sizes.append(lsh._signatures.nbytes)
    assert len(collection) == 2000
    assert collection.stats()["evicted"] == 60 * 256 - 2000
    # 2,000 signatures of 512 bytes live, give or take a page per straggler run.
    assert max(sizes[20:]) < 2 * 2000 * 512 + 64 * 4096, sizes
    collection._check()


def test_the_budget_is_shared_between_collections() -> None:
    clock = FakeClock()
    budget = DocumentBudget(10)
    stores = [MemoryStore(), MemoryStore()]
    first, second = (open_collection(s, CollectionConfig(), clock, budget) for s in stores)
    now = clock.us
    answers = first.insert([NewDocument(STORIES[i], f"a{i}", None, now) for i in range(7)])
    assert all(isinstance(a, InsertResult) for a in answers)
    answers = second.insert([NewDocument(STORIES[i], f"b{i}", None, now) for i in range(7)])
    codes = [a.error.code if isinstance(a, Refused) else "ok" for a in answers]
    assert codes == ["ok"] * 3 + ["insufficient_storage"] * 4
    second.delete("b0")
    assert isinstance(second.insert([NewDocument(STORIES[9], "b9", None, now)])[0], InsertResult)
    assert budget.total == 10 and len(first) + len(second) == 10


@pytest.mark.parametrize("service_limit", [None, 100])
def test_a_batch_past_the_collection_limit_is_refused_with_its_reason(
    service_limit: int | None,
) -> None:
    """The documents of a batch past limits.max_documents name the collection's limit,
    whether or not a service-wide one is set (the batch's own earlier documents count)."""
    clock = FakeClock()
    config = CollectionConfig(limits=LimitsConfig(max_documents=5))
    collection = open_collection(MemoryStore(), config, clock, DocumentBudget(service_limit))
    answers = collection.insert(
        [NewDocument(STORIES[i], f"d{i}", None, clock.us) for i in range(8)]
    )
    refused = [a for a in answers if isinstance(a, Refused)]
    assert [a.id for a in refused] == ["d5", "d6", "d7"]
    for answer in refused:
        assert answer.error.code == "insufficient_storage"
        assert "limits.max_documents" in str(answer.error), answer.error
    assert len(collection) == 5


def test_deleted_documents_do_not_move_the_retention_mark() -> None:
    """A deleted document newer than every expired one does not decide what counts as
    expired: once the retention is lifted, a document older than the deleted one but
    newer than every expired one is stored (as if nothing had been deleted)."""
    clock = FakeClock()
    config = CollectionConfig(retention=RetentionConfig(max_age="10s"))
    collection = open_collection(MemoryStore(), config, clock)
    start = clock.us
    collection.insert([NewDocument(STORIES[0], "old", None, start)])
    collection.insert([NewDocument(STORIES[1], "deleted", None, start + 5_000_000)])
    collection.delete("deleted")
    clock.advance(30)
    assert collection.stats()["documents"] == 0  # "old" expired
    collection.reconfigure(CollectionConfig())
    [answer] = collection.insert([NewDocument(STORIES[2], "between", None, start + 3_000_000)])
    assert isinstance(answer, InsertResult) and answer.inserted
    assert collection.get("between").id == "between"
    with pytest.raises(UnknownDocument):
        collection.get("old")


def test_count_retention_never_needs_more_room_than_it_keeps() -> None:
    """A collection at its retention count adds nothing net: the service-wide limit does
    not refuse it (the oldest goes instead)."""
    clock = FakeClock()
    budget = DocumentBudget(5)
    config = CollectionConfig(retention=RetentionConfig(max_documents=5))
    collection = open_collection(MemoryStore(), config, clock, budget)
    for i in range(12):
        [answer] = collection.insert([NewDocument(STORIES[i % 12], f"s{i}", None, clock.us)])
        assert isinstance(answer, InsertResult) and answer.inserted
        clock.advance(1)
    assert len(collection) == 5 and budget.total == 5
    assert [m.id for m in collection.search(STORIES[11], Query())] == ["s11"]
    assert collection.search(STORIES[0], Query()) == []


def test_the_row_order_of_equal_timestamps_decides_the_count_retention() -> None:
    clock = FakeClock()
    config = CollectionConfig(retention=RetentionConfig(max_documents=3))
    collection = open_collection(MemoryStore(), config, clock)
    now = clock.us
    collection.insert([NewDocument(STORIES[i], f"e{i}", None, now) for i in range(5)])
    named = sorted(dict(collection._rows.row_of.items()))
    assert named == ["e0", "e1", "e2", "e3", "e4"]  # not evicted yet
    assert [len(collection.search(STORIES[i], Query())) for i in range(5)] == [0, 0, 1, 1, 1]
    # Older than the mark: expired on arrival, not stored.
    [late] = collection.insert([NewDocument(STORIES[5], "late", None, now - 1)])
    assert isinstance(late, InsertResult) and not late.inserted
    # Equal to the mark's time: newer by row, kept (and e2 goes).
    [same] = collection.insert([NewDocument(STORIES[6], "same", None, now)])
    assert isinstance(same, InsertResult) and same.inserted
    assert [len(collection.search(STORIES[i], Query())) for i in (2, 3, 4, 6)] == [0, 1, 1, 1]
    collection._check()


def test_a_cluster_named_by_an_expired_document_keeps_its_name() -> None:
    clock = FakeClock()
    config = CollectionConfig(retention=RetentionConfig(max_age="1h"))
    collection = open_collection(MemoryStore(), config, clock)
    for i in range(4):
        collection.insert([NewDocument(STORIES[3], f"c{i}", None, clock.us)])
        clock.advance(1500)
    # Now 6000 s: c0 (0 s) and c1 (1500 s) are older than an hour; c2 and c3 live on in
    # the cluster c0 named.
    while collection.evict():
        pass
    assert collection.get("c3").cluster_id == "c0"
    [answer] = collection.insert([NewDocument(STORIES[3], "c4", None, clock.us)])
    assert isinstance(answer, InsertResult)
    assert answer.cluster_id == "c0" and answer.duplicate_of == "c2"
    assert collection.stats()["evicted"] == 2
    collection._check()


def test_kept_memory_is_per_live_row_after_restarts(tmp_path: Path) -> None:
    """Rows evicted before a restart are gaps afterwards: a restart rebuilds the live ones
    only, and the next row continues after every row ever used."""
    clock = FakeClock()
    config = CollectionConfig(retention=RetentionConfig(max_documents=10))
    store = SQLiteStore(tmp_path / "t.db", "NORMAL")
    collection = open_collection(store, config, clock)
    for i in range(40):
        collection.insert([NewDocument(STORIES[i % 12] + f" {i}", f"k{i}", None, clock.us)])
        clock.advance(1)
    while collection.evict():
        pass
    collection.flush()
    next_row = collection._rows.next_row
    store.close()
    store = SQLiteStore(tmp_path / "t.db", "NORMAL")
    collection = open_collection(store, config, clock)
    assert collection._rows.next_row == next_row == 40
    assert sorted(dict(collection._rows.row_of.items())) == sorted(f"k{i}" for i in range(30, 40))
    rows = np.array(sorted(dict(collection._rows.row_of.items()).values()))
    assert rows.tolist() == list(range(30, 40))
    store.close()
