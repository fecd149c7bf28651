"""The id map (app/backends/embedded/id_map.py) against a dict: ids named, replaced and
gone, across saves and adoptions, with hash collisions forced."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.backends.embedded import id_map as id_map_module
from app.backends.embedded.id_map import IdMap, id_hashes
from app.backends.embedded.states import GONE, LIVE
from app.core.paged_list import TEXT_CODEC, PackedStrings, PagedList
from app.core.row_array import RowArray


class Rows:
    """The columns an IdMap reads, written as RowTable writes them."""

    def __init__(self) -> None:
        self.ids = PagedList[str](TEXT_CODEC)
        self.state = RowArray(np.uint8)
        self.hashes = RowArray(np.uint64)
        self.map = IdMap(self.ids, self.state, self.hashes)
        self.next_row = 0

    def add(self, ids: list[str]) -> list[int]:
        rows = list(range(self.next_row, self.next_row + len(ids)))
        self.next_row += len(ids)
        for column in (self.state, self.hashes):
            column.ensure(self.next_row)
        self.ids.assign(np.array(rows), ids)
        self.hashes.array[rows] = id_hashes(ids)
        self.state.array[rows] = LIVE
        self.map.update(ids, rows)
        return rows

    def remove(self, row: int) -> None:
        self.state.array[row] = GONE
        document_id = self.ids[row]
        assert document_id is not None
        self.map.discard(document_id, row)

    def restarted(self) -> Rows:
        """A new table adopting what a save of this one holds."""
        again = Rows()
        again.ids.adopt_saved(self.ids.saved(self.next_row)())
        for mine, theirs in ((self.state, again.state), (self.hashes, again.hashes)):
            theirs.take(mine.array[: self.next_row].copy())
        again.map.adopt_saved(self.map.saved(self.state.array[: self.next_row].copy())())
        again.next_row = self.next_row
        return again


def check_against(table: Rows, reference: dict[str, int]) -> None:
    table.map._check()
    assert dict(table.map.items()) == reference
    for number in range(400):
        assert table.map.get(f"doc-{number}") == reference.get(f"doc-{number}")
    assert table.map.get("missing", -1) == -1


def change(table: Rows, reference: dict[str, int], rng: random.Random, count: int) -> None:
    """New ids, replaced ids (the new row first, then the old goes) and removed ids."""
    ids = [f"doc-{rng.randrange(400)}" for _ in range(count)]
    for document_id in dict.fromkeys(ids):
        old = reference.get(document_id)
        [row] = table.add([document_id])
        if old is not None:
            table.remove(old)
        reference[document_id] = row
    for document_id in rng.sample(sorted(reference), count // 4):
        table.remove(reference.pop(document_id))


@pytest.mark.parametrize("collide", [False, True])
def test_folds_answer_as_a_dict_before_during_and_after(
    collide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dict folded into the base (as a merge does) while ids are named, replaced and
    removed between the fold's start and end (its sort runs off the writer's lock): the
    map answers as a dict at every step, and after the fold from the base."""
    if collide:
        monkeypatch.setattr(id_map_module, "id_hash", lambda document_id: len(document_id) % 3)
    rng = random.Random(5)
    table, reference = Rows(), {}
    for _ in range(5):
        change(table, reference, rng, 60)
        fold = table.map.begin_fold(table.state.array[: table.next_row].copy())
        with pytest.raises(RuntimeError, match="under way"):
            table.map.begin_fold(table.state.array[: table.next_row].copy())
        check_against(table, reference)
        entries = fold()
        change(table, reference, rng, 30)  # while the fold sorts
        check_against(table, reference)
        table.map.end_fold(entries)
        check_against(table, reference)
        assert not table.map._named or len(table.map._named) < 60  # what came since
    table = table.restarted()
    check_against(table, reference)


def test_a_fold_is_due_at_a_share_of_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(id_map_module, "FOLD_MIN_ENTRIES", 10)
    table = Rows()
    table.add([f"a{number}" for number in range(9)])
    assert not table.map.fold_due()
    table.add(["a9"])
    assert table.map.fold_due()
    table.map.end_fold(table.map.begin_fold(table.state.array[: table.next_row].copy())())
    assert not table.map.fold_due()  # the base holds 10: a fold is due at 10 more
    for number in range(10):
        table.add([f"b{number}"])
    assert table.map.fold_due()


@pytest.mark.parametrize("batches", ["into the dict", "into the base"])
@pytest.mark.parametrize("collide", [False, True])
def test_the_id_map_answers_as_a_dict(
    collide: bool, batches: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With "into the base", every batch is as large as a start's (FOLD_MIN_ENTRIES):
    sorted into the base at once, the dict never used; a replaced id's new row is found
    while the old one is not gone yet."""
    if batches == "into the base":
        monkeypatch.setattr(id_map_module, "FOLD_MIN_ENTRIES", 1)
    if collide:  # few distinct hashes: ids are told apart by their text
        monkeypatch.setattr(id_map_module, "id_hash", lambda document_id: len(document_id) % 3)
    rng = random.Random(11)
    table, reference = Rows(), {}
    for step in range(6):
        ids = [f"doc-{rng.randrange(400)}" for _ in range(60)]
        for document_id in dict.fromkeys(ids):
            old = reference.get(document_id)
            if old is not None:  # a replacement: the new row first, then the old goes
                [row] = table.add([document_id])
                assert table.map.get(document_id) == row
                table.remove(old)
            else:
                [row] = table.add([document_id])
            reference[document_id] = row
        for document_id in rng.sample(sorted(reference), 15):
            table.remove(reference.pop(document_id))
        if step % 2:
            table = table.restarted()
        table.map._check()
        assert dict(table.map.items()) == reference
        for number in range(400):
            assert table.map.get(f"doc-{number}") == reference.get(f"doc-{number}")
        assert table.map.get("missing", -1) == -1


def test_packed_ids_hash_as_their_strings() -> None:
    """A restart's packed ids are hashed from their bytes: as id_hash hashes each string."""
    ids = ["doc-1", "é\u4e2d", "\ud800lone", "x" * 500]
    assert id_hashes(PackedStrings.of(ids)).tolist() == [id_map_module.id_hash(i) for i in ids]
