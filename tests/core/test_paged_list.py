"""PagedList packed pages (app/core/paged_list.py) against a dict of row -> object: a
list saved and adopted packed reads, releases, assigns and saves again as one that never
was."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from app.core.paged_list import TEXT_CODEC, PackedStrings, PagedList, json_codec

META = json_codec(json.dumps, json.loads)


def saved_and_adopted(paged: PagedList[object], rows: int) -> PagedList[object]:
    adopted = PagedList[object](paged._codec)
    adopted.adopt_saved(paged.saved(rows)())
    return adopted


def test_a_packed_list_behaves_as_a_dict_through_saves_releases_and_assigns() -> None:
    rng = random.Random(3)
    size = 3 * PagedList.PAGE_ROWS + 17
    reference: dict[int, object] = {}
    paged = PagedList[object](META)
    rows = sorted(rng.sample(range(size), size // 2))
    values = [{"k": i, "t": "é\u4e2d" * (i % 3)} if i % 5 else [i] for i in rows]
    paged.assign(np.array(rows), values)
    reference.update(zip(rows, values, strict=True))
    for round_ in range(4):
        paged = saved_and_adopted(paged, size)
        paged._check()
        assert all(paged[row] == reference.get(row) for row in range(size + 5))
        assert paged.get_many(list(range(100, 200))) == [reference.get(r) for r in range(100, 200)]
        gone = rng.sample(range(size), 900)
        assert paged.release(np.array(gone)) == sum(row in reference for row in set(gone))
        for row in gone:
            reference.pop(row, None)
        new = rng.sample(range(size), 40)
        paged.assign(np.array(new), [f"v{round_}-{row}" for row in new])
        reference.update({row: f"v{round_}-{row}" for row in new})
        paged._check()
        assert all(paged[row] == reference.get(row) for row in range(size))
    # Rows past a short last page that leave it untouched keep their places.
    far = size + 2 * PagedList.PAGE_ROWS
    paged.assign(np.array([far]), ["far"])
    reference[far] = "far"
    paged = saved_and_adopted(paged, far + 1)
    assert all(paged[row] == reference.get(row) for row in range(far + 1))
    # Every page released: dropped.
    paged.release(np.arange(far + 1))
    assert paged.pages == 0 and all(paged[row] is None for row in range(far + 1))


def test_a_save_taken_before_releases_holds_what_was_there_then() -> None:
    paged = PagedList[str](TEXT_CODEC)
    paged.assign(np.arange(10), [f"id{i}" for i in range(10)])
    adopted = PagedList[str](TEXT_CODEC)
    adopted.adopt_saved(paged.saved(10)())
    encode = adopted.saved(10)
    adopted.release(np.array([2, 3]))
    again = PagedList[str](TEXT_CODEC)
    again.adopt_saved(encode())
    assert [again[i] for i in range(10)] == [f"id{i}" for i in range(10)]
    assert [adopted[i] for i in range(4)] == ["id0", "id1", None, None]


def test_pages_packed_in_place_read_release_and_assign_as_before() -> None:
    """pack_next packs each full page below the bound once (not the page rows are still
    written to); reads, releases, assigns and saves then behave as a dict, and a page
    an assign unpacks is packed again by the next calls."""
    rng = random.Random(9)
    size = 3 * PagedList.PAGE_ROWS + 100
    paged = PagedList[object](META)
    rows = sorted(rng.sample(range(size), size // 2))
    reference: dict[int, object] = {row: {"n": row, "s": "中" * (row % 4)} for row in rows}
    paged.assign(np.array(rows), list(reference.values()))
    packed = 0
    while paged.pack_next(size):
        packed += 1
    assert packed == 3  # the three full pages, not the fourth
    assert [type(page).__name__ for page in paged._pages] == ["PackedPage"] * 3 + ["ndarray"]
    assert not paged.pack_next(size)
    paged._check()
    assert all(paged[row] == reference.get(row) for row in range(size))
    gone = rng.sample(range(size), 2000)
    assert paged.release(np.array(gone)) == sum(row in reference for row in set(gone))
    for row in gone:
        reference.pop(row, None)
    paged.assign(np.array([5]), ["new"])  # unpacks the first page
    reference[5] = "new"
    assert type(paged._pages[0]).__name__ == "ndarray"
    assert paged.pack_next(size) and not paged.pack_next(size)
    paged._check()
    assert all(paged[row] == reference.get(row) for row in range(size))
    again = saved_and_adopted(paged, size)
    assert all(again[row] == reference.get(row) for row in range(size))


def test_packed_strings_read_as_the_list_they_were_made_of() -> None:
    strings = ["a", "é\u4e2d", "\ud800lone", "x" * 300, "b"] * 7
    packed = PackedStrings.of(strings)
    assert len(packed) == len(strings) and list(packed) == strings
    assert [packed[i] for i in range(-3, len(strings))] == strings[-3:] + strings
    assert list(packed[4:9]) == strings[4:9] and list(packed[9:4]) == []
    assert list(packed[3:][2:]) == strings[5:]
    assert list(packed.encoded(batch=3)) == [s.encode("utf-8", "surrogatepass") for s in strings]
    with pytest.raises(ValueError, match="step"):
        packed[::2]
    for outside in (len(strings), -len(strings) - 1):
        with pytest.raises(IndexError):
            packed[outside]


def test_packed_strings_assigned_as_packed_pages_read_as_a_dict() -> None:
    """Packed strings assigned to ascending rows with gaps, over four pages, one of which
    holds objects already: empty pages become packed pages over the strings' bytes, the
    other is assigned one by one; reads, releases, assigns and saves then behave as a
    dict."""
    rng = random.Random(4)
    size = 4 * PagedList.PAGE_ROWS
    paged = PagedList[str](TEXT_CODEC)
    paged.assign(np.array([2 * PagedList.PAGE_ROWS + 1]), ["there before"])
    reference = {2 * PagedList.PAGE_ROWS + 1: "there before"}
    rows = sorted(rng.sample(range(size), size // 3))
    rows = [row for row in rows if row not in reference]
    strings = [f"id-{row}-{'中' * (row % 3)}" for row in rows]
    paged.assign(np.array(rows), PackedStrings.of(strings))
    reference.update(zip(rows, strings, strict=True))
    kinds = [type(page).__name__ for page in paged._pages]
    assert kinds == ["PackedPage", "PackedPage", "ndarray", "PackedPage"]
    paged._check()
    assert all(paged[row] == reference.get(row) for row in range(size + 3))
    gone = rng.sample(range(size), 500)
    assert paged.release(np.array(gone)) == sum(row in reference for row in set(gone))
    for row in gone:
        reference.pop(row, None)
    paged.assign(np.array([7]), ["new"])
    reference[7] = "new"
    paged._check()
    assert all(paged[row] == reference.get(row) for row in range(size))
    again = saved_and_adopted(paged, size)
    assert all(again[row] == reference.get(row) for row in range(size))
    with pytest.raises(ValueError, match="ascending"):
        paged.assign(np.array([size + 9, size + 2]), PackedStrings.of(["b", "a"]))


def test_packed_strings_equal_the_lists_they_hold() -> None:
    packed = PackedStrings.of(["a", "b"])
    reflected = ["a", "b"].__eq__(packed)  # a list's own == defers to PackedStrings'
    assert packed == ["a", "b"] and reflected is NotImplemented and packed == ("a", "b")
    assert packed != ["a"] and packed != ["a", "c"] and packed != "ab"
