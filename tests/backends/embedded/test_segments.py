"""A restart from index segments (app/backends/embedded/saving.py) answers exactly as the
service that never restarted, and as a rebuild from SQLite alone: after inserts, deletes,
replacements, merges and evictions, with rows after the last segment to replay, and with
segments that are damaged, of other settings, or written by a process killed midway."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.backends.embedded import passages as embedded_passages
from app.backends.embedded.check import check_store
from app.backends.embedded.passages import PassageSearch
from app.backends.embedded.registry import Registry
from app.collection_config import (
    CollectionConfig,
    NgramConfig,
    PassagesConfig,
    RetentionConfig,
    ShingleConfig,
)
from app.core.saved import SavedArrays
from app.errors import StorageUnavailable, UnknownDocument
from app.main import DATABASE_FILE
from app.service.types import InsertOptions, NewDocument, Query
from app.storage.commit import settled
from app.storage.segments import MANIFEST, SegmentStore
from app.storage.sqlite import SQLiteStore
from devkit.corpus import english_like_text, mutate_words
from devkit.server import neardup_command

CONFIGS = {
    "plain": CollectionConfig(),
    "full": CollectionConfig(
        shingle=ShingleConfig(unit="word", size=3),
        ngram=NgramConfig(enabled=True),
        passages=PassagesConfig(enabled=True),
        retention=RetentionConfig(max_documents=700),
    ),
}


def stream_texts(seed: int, count: int) -> list[str]:
    """Texts with near-duplicates among them, long and short (the n-gram index's)."""
    rng = random.Random(seed)
    bases = [english_like_text(rng, rng.choice([60, 400, 1500])) for _ in range(count // 3)]
    return [mutate_words(rng, rng.choice(bases), rng.choice([0, 0.02, 0.1])) for _ in range(count)]


def run_stream(registry: Registry, seed: int, *, save_at: set[int]) -> list[str]:
    """A seeded stream of batches, deletes, replacements, merges and evictions into every
    collection; a segment written after the steps in ``save_at``. Returns the texts."""
    rng = random.Random(seed)
    texts = stream_texts(seed, 1600)
    for name, config in CONFIGS.items():
        registry.create(name, config)
    for step in range(16):
        for name in CONFIGS:
            collection = registry.get(name)
            first = step * 100
            batch = [NewDocument(texts[i], f"d{i}", {"i": i}) for i in range(first, first + 100)]
            collection.insert(batch)
            for _ in range(5):
                with contextlib.suppress(UnknownDocument):  # deleted or evicted already
                    collection.delete(f"d{rng.randrange(first + 100)}")
            if step % 5 == 2:  # replace a document's text under its id
                victim = f"d{rng.randrange(first + 100)}"
                replaced = NewDocument(texts[rng.randrange(1600)], victim)
                collection.insert([replaced], InsertOptions(replace=True))
            if step % 4 == 3:
                collection.merge(force=True)
        registry.evict()
        if step in save_at:
            assert registry.save_segments(everything=True) == len(CONFIGS)
    return texts


def answers(registry: Registry, texts: list[str]) -> dict[str, Any]:
    """What a client sees of each collection: searches, similar documents, documents."""
    seen: dict[str, Any] = {}
    query = Query(limit=50)
    for name in CONFIGS:
        collection = registry.get(name)
        seen[f"{name} stats"] = {
            key: collection.stats()[key] for key in ("documents", "duplicates", "expiring")
        }
        for number in range(0, len(texts), 37):
            seen[f"{name} search {number}"] = collection.search(texts[number], query)
            document_id = f"d{number}"
            try:
                seen[f"{name} get {number}"] = collection.get(document_id)
                seen[f"{name} similar {number}"] = collection.similar(document_id, query)
            except UnknownDocument as error:
                seen[f"{name} get {number}"] = type(error).__name__
    return seen


# Every registry's clock: the documents' insert times are part of the answers.
NOW = 1_800_000_000.0


def opened(path: Path, segments: bool = True) -> Registry:
    store = SQLiteStore(path, segments="beside" if segments else None)
    registry = Registry(store, clock=lambda: NOW)
    registry.open()
    for collection in registry.list():
        collection._check()
    return registry


def test_a_restart_from_segments_answers_as_the_service_that_never_restarted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=1, save_at={6, 11})
    expected = answers(running, texts)
    segments = SegmentStore(path.with_suffix(".segments"))
    covered = segments.manifest("full")
    assert covered is not None and 0 < covered["rows_below"] < running.get("full")._rows.next_row
    # Killed, as far as the segments know: the rows after step 11 are replayed.
    running.close(save_segments=False)
    restarted = opened(path)
    full = restarted.get("full")
    assert full._segment.rows_below == covered["rows_below"]  # taken from it, then replayed
    assert answers(restarted, texts) == expected
    rebuilt = opened(path, segments=False)
    assert answers(rebuilt, texts) == expected
    rebuilt.close(save_segments=False)
    # The restarted service goes on: inserts, deletes, a merge; then a clean stop writes
    # its segments, and both kinds of start answer as it did.
    for name in CONFIGS:
        collection = restarted.get(name)
        collection.insert([NewDocument(texts[3], "late"), NewDocument(texts[1590], "late2")])
        with contextlib.suppress(UnknownDocument):  # evicted
            collection.delete("d1590")
        collection.merge(force=True)
        collection._check()
    after = answers(restarted, texts)
    assert after != expected
    restarted.close()
    assert answers(opened(path), texts) == after
    assert answers(opened(path, segments=False), texts) == after


def _break(segments: SegmentStore, how: str) -> None:
    directory = segments.directory("full")
    if how == "bit flipped":
        data = sorted(path for path in directory.iterdir() if path.name.endswith(".bin"))
        biggest = max(data, key=lambda path: path.stat().st_size)
        content = bytearray(biggest.read_bytes())
        content[len(content) // 2] ^= 0x01
        biggest.write_bytes(bytes(content))
    elif how == "truncated":
        data = [path for path in directory.iterdir() if path.name.endswith(".bin")]
        victim = max(data, key=lambda path: path.stat().st_size)
        victim.write_bytes(victim.read_bytes()[:100])
    elif how == "other settings":
        # The segment of a collection with other fixed settings, under this one's name.
        shutil.rmtree(directory)
        shutil.copytree(segments.directory("plain"), directory)
        manifest = (directory / MANIFEST).read_text().replace('"plain"', '"full"')
        (directory / MANIFEST).write_text(manifest)


@pytest.mark.parametrize("how", ["bit flipped", "truncated", "other settings"])
def test_a_damaged_segment_is_rebuilt_from_sqlite(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=2, save_at={9})
    expected = answers(running, texts)
    running.close(save_segments=False)
    segments = SegmentStore(path.with_suffix(".segments"))
    _break(segments, how)
    restarted = opened(path)
    assert "cannot be used" in caplog.text and "'full'" in caplog.text
    assert answers(restarted, texts) == expected
    assert segments.manifest("full") is None  # removed: the next stop writes a good one
    restarted.close()
    assert segments.manifest("full") is not None
    assert answers(opened(path), texts) == expected


KILLED_SAVE = """
import sys
from pathlib import Path
from app.backends.embedded.registry import Registry
from app.storage.segments import SegmentStore
from app.storage.sqlite import SQLiteStore
from tests.backends.embedded.test_segments import NOW, run_stream
path = Path(sys.argv[1])
segments = SegmentStore(path.with_suffix(".segments"))
registry = Registry(SQLiteStore(path, segments=segments), clock=lambda: NOW)
registry.open()
run_stream(registry, seed=3, save_at={4})
for collection in registry.list():
    collection.flush()
segments._fail_at = sys.argv[2]  # the next write is killed at this step
registry.save_segments(everything=True)
"""


@pytest.mark.parametrize("step", ["files-synced", "manifest", "renamed"])
def test_a_service_killed_while_writing_segments_restarts_correctly(
    tmp_path: Path, step: str
) -> None:
    """A process that wrote its documents and was killed at a step of a segment write
    (SIGKILL, no clean-up): the restart answers as a service that ran the same stream."""
    path = tmp_path / "killed" / "neardup.db"
    path.parent.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE, str(path), step],
        capture_output=True,
        timeout=300,
        cwd=Path(__file__).parents[3],
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    reference = opened(tmp_path / "reference" / "neardup.db")
    texts = run_stream(reference, seed=3, save_at=set())
    restarted = opened(path)
    assert answers(restarted, texts) == answers(reference, texts)


def _rewritten(segments: SegmentStore, name: str, change: Callable[[SavedArrays], None]) -> None:
    """The collection's segment written again, changed, with checksums that verify."""
    manifest = segments.manifest(name)
    assert manifest is not None
    segment = segments.open(name, manifest["settings"])
    assert segment is not None
    arrays = {key: np.array(array) for key, array in segment.arrays.items()}
    change(arrays)
    segments.write(name, manifest["settings"], segment.rows_below, arrays)


def _flip_simhash(arrays: SavedArrays) -> None:
    arrays["rows/simhash@rows"][40] ^= np.uint64(1)


def _shuffle_a_run(arrays: SavedArrays) -> None:
    keys = arrays["indexes/exact/table/main.keys"]
    keys[0, [3, 9]] = keys[0, [9, 3]]


def neardup_check(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``neardup check`` of a data directory, as a user runs it."""
    return subprocess.run(
        [neardup_command(), "check", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_neardup_check_verifies_segments_against_the_database(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    path = data_dir / DATABASE_FILE
    running = opened(path)
    run_stream(running, seed=4, save_at=set())
    documents = len(running.get("full"))
    running.close()
    store = SQLiteStore(path)
    reports = {report["collection"]: report for report in check_store(store)}
    assert {name: report["segment"] for name, report in reports.items()} == {
        "default": "none",  # empty: nothing to write
        "plain": "ok",
        "full": "ok",
    }
    assert reports["full"]["documents"] == documents
    segments = SegmentStore(path.with_suffix(".segments"))
    _rewritten(segments, "plain", _flip_simhash)
    _rewritten(segments, "full", _shuffle_a_run)
    reports = {report["collection"]: report for report in check_store(store)}
    assert reports["plain"]["segment"] == "damaged"
    assert "simhash of row 40 differs" in reports["plain"]["problem"]
    assert reports["full"]["segment"] == "damaged"
    assert "do not check" in reports["full"]["problem"]
    store.close()
    # The command: one JSON line a collection, exit 1 when any is damaged.
    command = neardup_check(data_dir)
    assert command.returncode == 1, command.stderr
    database, *lines = [json.loads(line) for line in command.stdout.splitlines()]
    assert database == {"database": "ok"}
    assert [(line["collection"], line["segment"]) for line in lines] == [
        ("default", "none"),
        ("full", "damaged"),
        ("plain", "damaged"),
    ]


def test_a_segment_that_cannot_be_written_is_said_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=5, save_at={3})
    expected = answers(running, texts)

    def full_disk(*arguments: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SegmentStore, "write", full_disk)
    assert running.save_segments(everything=True) == 0
    assert "could not write the index segment of 'full'" in caplog.text
    assert answers(running, texts) == expected
    monkeypatch.undo()
    running.close(save_segments=False)
    assert answers(opened(path), texts) == expected  # the step-3 segment, then a replay


def test_a_rebuild_indexes_passages_in_chunks_as_it_would_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The passage index of a rebuild, made INSERT_CHUNK texts at a time, holds what one
    insert of every text makes: the same candidates, in the same order."""
    texts: list[str | None] = list(stream_texts(6, 300))
    texts[5] = None  # a document whose text is not kept
    rows = np.arange(len(texts), dtype=np.int64) * 2
    config = CONFIGS["full"].passages
    whole = PassageSearch(config, lambda row: None)
    whole.insert(texts, rows)
    monkeypatch.setattr(embedded_passages, "INSERT_CHUNK", 7)
    chunked = PassageSearch(config, lambda row: None)
    chunked.insert(texts, rows)
    for search in (whole, chunked):
        search.merge()
        search.index._check()
    queries = [config.fingerprints([text])[0] for text in texts[::13] if text is not None]
    for mine, theirs in zip(
        chunked.candidates_many(queries), whole.candidates_many(queries), strict=True
    ):
        assert mine.tolist() == theirs.tolist()
    assert len(chunked.index) == len(whole.index) == len(texts) - 1


def test_rows_a_segment_holds_but_the_database_lost_are_never_reused(tmp_path: Path) -> None:
    """A segment taken after documents were published whose commit then failed (or never
    became durable before a crash) holds rows the database does not: the restart leaves
    them out and numbers new documents after them."""
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=7, save_at={15})  # the last step: nothing after it
    covered = SegmentStore(path.with_suffix(".segments")).manifest("plain")
    assert covered is not None
    running.close(save_segments=False)
    database = sqlite3.connect(path)  # the last 30 rows the segment holds, lost
    with database:
        database.execute(
            "DELETE FROM documents WHERE collection = 'plain' AND row >= ? AND row < ?",
            (covered["rows_below"] - 30, covered["rows_below"]),
        )
    database.close()  # the last connection: the WAL is checkpointed into the file
    shutil.copy(path, tmp_path / "copy.db")  # for a rebuild from the database alone
    restarted = opened(path)
    rebuilt = opened(tmp_path / "copy.db", segments=False)
    assert answers(restarted, texts) == answers(rebuilt, texts)
    for registry in (restarted, rebuilt):
        late = [NewDocument(texts[i], f"late{i}") for i in range(0, 300, 3)]
        registry.get("plain").insert(late)
        registry.get("plain")._check()
    assert answers(restarted, texts) == answers(rebuilt, texts)


def test_a_segment_of_another_copy_of_the_database_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same rows, live and deleted alike, but one document other than the segment
    holds (a database restored from another copy): found by the start's check of the
    last documents below the segment, and rebuilt."""
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=8, save_at={15})
    running.close(save_segments=False)
    database = sqlite3.connect(path)
    with database:
        (row,) = database.execute(
            "SELECT max(row) FROM documents WHERE collection = 'plain' AND deleted = 0"
        ).fetchone()
        other = np.array([3, 4], dtype=np.uint64).tobytes()
        database.execute(
            "UPDATE documents SET exact = ? WHERE collection = 'plain' AND row = ?", (other, row)
        )
    database.close()
    restarted = opened(path)
    assert "exact hashes are not those the database holds" in caplog.text
    shutil.copy(path, tmp_path / "copy.db")
    assert answers(restarted, texts) == answers(opened(tmp_path / "copy.db", segments=False), texts)


def test_no_segment_is_written_while_a_commit_it_would_cover_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents published whose commit failed are in memory until they are taken out
    again: a segment taken then would hold documents the database never got. It is not
    written; the next one, once they are out, is, and a restart from it answers as a
    rebuild from the database alone."""
    path = tmp_path / "neardup.db"
    running = opened(path)
    texts = run_stream(running, seed=3, save_at={4})
    before = SegmentStore(path.with_suffix(".segments")).manifest("plain")
    assert before is not None
    collection = running.get("plain")
    store = collection._store
    writes = collection._writes
    tried: list[int] = []
    undo = writes._undo

    def failing_commit(name: str, documents: Any, mark: Any = None) -> Any:
        return settled(StorageUnavailable("disk full"))

    def undo_after_a_save(insertion: Any) -> None:
        tried.append(running.save_segments(everything=True))  # the failed rows still in
        undo(insertion)

    monkeypatch.setattr(store, "begin_add_documents", failing_commit)
    monkeypatch.setattr(writes, "_undo", undo_after_a_save)
    with pytest.raises(StorageUnavailable):
        collection.insert([NewDocument(texts[i], f"lost{i}") for i in range(10)])
    monkeypatch.undo()
    assert tried == [len(CONFIGS) - 1]  # every collection's but this one
    assert SegmentStore(path.with_suffix(".segments")).manifest("plain") == before
    assert running.save_segments(everything=True) == 1  # now that they are out
    running.close(save_segments=False)
    shutil.copy(path, tmp_path / "copy.db")
    restarted = opened(path)
    rebuilt = opened(tmp_path / "copy.db", segments=False)
    assert answers(restarted, texts) == answers(rebuilt, texts)
    assert restarted.get("plain").stats()["documents"] == rebuilt.get("plain").stats()["documents"]


def test_the_removal_log_is_pruned_up_to_the_segment(tmp_path: Path) -> None:
    """Deletes and evictions are logged in their transactions; a segment written forgets
    the entries it reflects; a store without segments logs nothing."""
    path = tmp_path / "neardup.db"
    running = opened(path)
    run_stream(running, seed=5, save_at=set())
    database = sqlite3.connect(path)

    def logged() -> int:
        return int(database.execute("SELECT count(*) FROM removed").fetchone()[0])

    assert logged() > 0
    assert running.save_segments(everything=True) == len(CONFIGS)
    running.get("plain").delete("d1500")
    running.close(save_segments=False)  # commits what was queued (the pruning)
    assert logged() == 1  # only the delete after the segment
    database.close()
    plain = opened(tmp_path / "plain.db", segments=False)
    run_stream(plain, seed=5, save_at=set())
    plain.close(save_segments=False)
    other = sqlite3.connect(tmp_path / "plain.db")
    assert other.execute("SELECT count(*) FROM removed").fetchone()[0] == 0
    other.close()


def test_commits_known_durable_are_not_kept_without_segments(tmp_path: Path) -> None:
    """What a segment waits for is pruned as commits settle, even where no segment ever
    asks (segments off): memory does not grow with the inserts."""
    registry = opened(tmp_path / "neardup.db", segments=False)
    collection = registry.get("default")
    for number in range(700):
        collection.insert([NewDocument(f"document number {number} of a few words", f"n{number}")])
    assert len(collection._writes.commits._inflight) <= 256
    registry.close(save_segments=False)


def test_neardup_check_finds_a_damaged_page_of_the_database(tmp_path: Path) -> None:
    """A start reads only the pages it needs; ``neardup check`` reads every one."""
    data_dir = tmp_path / "data"
    running = opened(data_dir / DATABASE_FILE, segments=False)
    run_stream(running, seed=2, save_at=set())
    running.close(save_segments=False)
    path = data_dir / DATABASE_FILE
    data = bytearray(path.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page  # a page of documents, not the header
    data[middle + 100 : middle + 400] = bytes(300)
    path.write_bytes(bytes(data))
    command = neardup_check(data_dir)
    assert command.returncode == 1, command.stderr
    first = json.loads(command.stdout.splitlines()[0])
    assert first["database"] == "damaged" and first["problem"], first
