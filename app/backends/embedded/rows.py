"""The per-row records of an embedded collection: each document's id, metadata, text,
times, cluster, SimHash and state, the rows by id, and the members of each cluster.

Rows are appended in ascending order and never reused. Every record of a row is written
before the row enters any index (readers take no lock and rely on it), and its memory is
given back by whole pages once the row is GONE (app/core/row_array.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.embedded.clusters import ClusterMembers
from app.backends.embedded.id_map import IdMap, id_hashes
from app.backends.embedded.states import GONE, HIDDEN, LIVE, MOVING
from app.backends.embedded.texts import KeptTexts, TextReader
from app.core.paged_list import TEXT_CODEC, PagedList, json_codec
from app.core.row_array import RowArray, ascending_run, gathered, sorted_unique
from app.core.saved import ROWS_SUFFIX, SavedArrays, SavedStateError, nested, part, wanted
from app.core.types import Rows
from app.service.times import iso_time_us
from app.service.types import StoredDocument, iso_time
from app.storage.base import DocumentBatch, StoredCollection

# _low_row moves past GONE rows this many at a time.
_LOW_ROW_STEP = 65_536
# Metadata packed in a segment: compact JSON (never empty, so an empty slot is None).
_METADATA_CODEC = json_codec(
    lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False), json.loads
)


class RowTable:
    """Per-row columns (numbers as numpy columns: 8 bytes a row where a list of Python
    objects costs 36), the id -> row map, cluster members and the counts of LIVE rows
    and of LIVE rows that joined another's cluster. No locking: the collection's write
    lock serialises every change. A segment holds them all but the texts and states
    (``saved_arrays``): a start adopts them, packed, with no Python object a row."""

    def __init__(self, read_texts: TextReader = lambda rows: [None] * len(rows)) -> None:
        """``read_texts``: the kept texts of rows from the store (KeptTexts)."""
        self.ids = PagedList[str](TEXT_CODEC)  # ids are never empty
        self.metadata = PagedList[dict[str, Any]](_METADATA_CODEC)
        self.texts = KeptTexts(read_texts)
        self.created = RowArray(np.float64)  # row -> unix time of the insert
        self.timestamp = RowArray(np.int64)  # row -> the document's time, microseconds
        self.cluster = RowArray(np.int64)  # row -> row of the document naming its cluster
        self.simhash = RowArray(np.uint64)
        self.state = RowArray(np.uint8)  # LIVE, HIDDEN, MOVING or GONE
        self.id_hash = RowArray(np.uint64)  # what the id map looks a row's id up by
        self.next_row = 0
        # Rows below it were shown (``show``): a read that starts now sees none above it,
        # whatever is published while it runs.
        self.shown_end = 0
        self._low_row = 0  # every row below is GONE (see low_row)
        self.row_of = IdMap(self.ids, self.state, self.id_hash)
        self.members = ClusterMembers()  # cluster row -> the other rows that joined it
        self.visible = 0  # LIVE documents
        self.duplicates = 0  # LIVE documents listed in a cluster's members

    def __len__(self) -> int:
        return self.visible

    def stored(self, document_id: str, row: int, with_text: bool) -> StoredDocument | None:
        """The stored document of a row (its text ``with_text``: kept for passages
        alone, it is not given out); None if it stopped being LIVE meanwhile."""
        stored = StoredDocument(
            id=document_id,
            metadata=self.metadata[row],
            created_at=iso_time(float(self.created.array[row])),
            cluster_id=self.ids[int(self.cluster.array[row])] or document_id,
            simhash=f"{int(self.simhash.array[row]):016x}",
            text=self.texts[row] if with_text else None,
            timestamp=iso_time_us(int(self.timestamp.array[row])),
        )
        if self.row_of.get(document_id) != row or self.state.array[row] != LIVE:
            return None  # evicted while we read it
        return stored

    def record(self, batch: DocumentBatch) -> None:
        """Write the per-row records of committed documents (before any index takes
        them): MOVING until ``show`` (once every index holds them), in their clusters,
        counted as LIVE. O(batch)."""
        size = int(batch.rows[-1]) + 1
        if int(batch.rows[0]) < self.next_row:
            raise AssertionError("rows are appended in ascending order, never reused")
        rows = batch.rows
        self.ids.assign(rows, batch.ids)
        self.metadata.assign(rows, batch.metadata)
        for column in (self.created, self.timestamp, self.cluster, self.state):
            column.ensure(size)
        # Rows of documents deleted before a restart leave gaps: GONE (zero) from the start.
        self.state.array[rows] = MOVING
        self.next_row = size
        self.created.array[rows] = batch.created_at
        self.timestamp.array[rows] = batch.timestamp_column()
        self.cluster.array[rows] = batch.clusters
        joined = batch.clusters != rows
        for root, row in zip(batch.clusters[joined].tolist(), rows[joined].tolist(), strict=True):
            self.members.add(root, row)
        self.visible += len(batch)
        self.duplicates += int(np.count_nonzero(joined))
        # What scoring reads of a row found by any index is written before the row enters
        # any index: its SimHash here, its signature by the LSH index.
        self.simhash.ensure(size)
        self.simhash.array[rows] = batch.simhash
        self.id_hash.ensure(size)
        self.id_hash.array[rows] = id_hashes(batch.ids)

    def show(self, rows: Rows) -> None:
        """Recorded rows that every index holds now: LIVE, visible to reads at once, and
        below ``shown_end`` (rows are shown in ascending order, as they are recorded)."""
        if not len(rows):
            return
        self.state.array[rows] = LIVE
        self.shown_end = max(self.shown_end, int(rows[-1]) + 1)

    def leaving(self, array: Rows, was: npt.NDArray[np.uint8]) -> None:
        """``held``'s rows, about to leave the indexes: the LIVE ones are hidden from
        reads at once, before the first index drops them (``drop`` counts by ``was``)."""
        self.state.array[array[was == LIVE]] = MOVING

    def name(self, batch: DocumentBatch) -> None:
        """Make the batch's ids find their rows (once the indexes hold them)."""
        self.row_of.update(batch.ids, batch.rows.tolist())

    def compact(self, write_lock: AbstractContextManager[object]) -> None:
        """The per-row Python objects made compact, as a start from a segment holds them:
        the id map's dict folded into its sorted base when due (IdMap.begin_fold: the
        sort runs off ``write_lock``, the collection's), and the full pages of ids and
        metadata packed (PagedList.pack_next), a page at a time under it (a few ms each).
        The only method here that takes the lock itself: it runs beside the writers."""
        with write_lock:
            fold = None
            if self.row_of.fold_due():
                self.state.ensure(self.next_row)
                fold = self.row_of.begin_fold(self.state.array[: self.next_row].copy())
        if fold is not None:
            entries = fold()
            with write_lock:
                self.row_of.end_fold(entries)
        packing = True
        while packing:
            with write_lock:
                packing = self.ids.pack_next(self.next_row) or self.metadata.pack_next(
                    self.next_row
                )

    def restored(self, stored: StoredCollection, names: dict[int, str], at_least: int = 0) -> None:
        """After the live documents of a restart: rows up to the store's next row, or
        ``at_least`` (those between are GONE), and the ids of gone rows that still name
        a cluster (``names``; those a segment holds already are left as they are)."""
        size = max(stored.next_row, self.next_row, at_least)
        for column in self._columns():
            column.ensure(size)
        self.next_row = size
        missing = sorted((row, name) for row, name in names.items() if self.ids[row] is None)
        self.ids.assign(
            np.array([row for row, _ in missing], dtype=np.int64), [n for _, n in missing]
        )

    def _columns(self) -> tuple[RowArray, ...]:
        return (self.created, self.timestamp, self.cluster, self.state, self.simhash, self.id_hash)

    # ------------------------------------------------------------------ segments

    _SAVED_COLUMNS = ("created", "timestamp", "cluster", "simhash", "id_hash")

    def saved_arrays(self) -> tuple[SavedArrays, Callable[[], SavedArrays]]:
        """The records of rows below next_row for a segment, in two steps: the numeric
        columns (views: a row's are written once) and a copy of the states, O(rows)
        memcpy under the write lock; then a function that encodes the ids and metadata
        of pages not packed yet and sorts the id map, off the lock."""
        size = self.next_row
        for column in self._columns():
            column.ensure(size)
        arrays = {
            f"{name}{ROWS_SUFFIX}": getattr(self, name).array[:size] for name in self._SAVED_COLUMNS
        }
        state = self.state.array[:size].copy()
        arrays["state"] = state  # whether each row was held: a start takes out the removed
        steps = {
            "ids": self.ids.saved(size),
            "metadata": self.metadata.saved(size),
            "id_map": self.row_of.saved(state),
        }

        def encoded() -> SavedArrays:
            later: SavedArrays = {}
            for name, step in steps.items():
                later.update(nested(name, step()))
            return later

        return arrays, encoded

    def adopt_saved(self, arrays: SavedArrays, live: Rows, below: int) -> None:
        """Take a segment's records of rows below ``below``, of which ``live`` (ascending)
        are the live documents the database holds: LIVE, counted, in their clusters; the
        others GONE. O(live) numpy work plus O(duplicates) for the cluster members.
        SavedStateError where the arrays do not fit: other sizes, or a live document
        without an id in the segment."""
        if self.next_row:
            raise ValueError("only an empty RowTable adopts saved records")
        for name in self._SAVED_COLUMNS:
            values = wanted(arrays, f"{name}{ROWS_SUFFIX}")
            if len(values) != below:
                raise SavedStateError(f"the {name} column holds {len(values)} rows, not {below}")
            getattr(self, name).take(values)
        ids = part(arrays, "ids")
        ends = wanted(ids, "ends")
        if len(ends) != below:
            raise SavedStateError(f"the ids hold {len(ends)} rows, not {below}")
        lengths = np.diff(ends, prepend=0)
        if len(live) and not bool(np.all(gathered(lengths, live) > 0)):
            raise SavedStateError("a live document below the segment's rows has no id in it")
        self.ids.adopt_saved(ids)
        self.metadata.adopt_saved(part(arrays, "metadata"))
        self.row_of.adopt_saved(part(arrays, "id_map"))
        self.state.ensure(below)
        run = ascending_run(live)
        if run is None:
            self.state.array[live] = LIVE
        else:
            self.state.array[run[0] : run[1]] = LIVE
        self.next_row = self.shown_end = below
        clusters = gathered(self.cluster.array, live)
        joined = clusters != live
        for root, row in zip(clusters[joined].tolist(), live[joined].tolist(), strict=True):
            self.members.add(root, row)
        self.visible = len(live)
        self.duplicates = int(np.count_nonzero(joined))

    def hide(self, live: Rows) -> None:
        """LIVE rows expired: HIDDEN until they are evicted."""
        self.state.array[live] = HIDDEN
        self.visible -= len(live)
        clusters = self.cluster.array[live]
        self.duplicates -= int(np.count_nonzero(clusters != live))

    def held(self, rows: list[int]) -> tuple[Rows, npt.NDArray[np.uint8]]:
        """(the rows not GONE, ascending and once each; their states)."""
        array = sorted_unique(rows)
        was = self.state.array[array]
        return array[was != GONE], was[was != GONE]

    def drop(self, array: Rows, was: npt.NDArray[np.uint8]) -> tuple[Rows, Rows, int]:
        """Rows GONE (``held``'s, already out of every index): out of the counts, the id
        map and their clusters. Returns (rows whose records may go, rows whose id still
        names a cluster, how many were LIVE). O(rows), in numpy but for the dictionaries."""
        state = self.state.array
        clusters = self.cluster.array[array]
        joined = clusters != array
        live = int(np.count_nonzero(was == LIVE))
        self.visible -= live
        self.duplicates -= int(np.count_nonzero((was == LIVE) & joined))
        state[array] = GONE
        row_of = self.row_of
        for row, document_id in zip(array.tolist(), self.ids.get_many(array.tolist()), strict=True):
            if document_id is not None:
                row_of.discard(document_id, row)
        orphans: list[int] = []  # clusters nobody is in now, named by a gone row
        for cluster in clusters[joined].tolist():
            if self.members.leave(cluster, state) and state[cluster] == GONE:
                orphans.append(cluster)
        roots = array[~joined]
        naming = np.array([row in self.members for row in roots.tolist()], dtype=np.bool_)
        released = sorted_unique(
            np.concatenate([array[joined], roots[~naming], np.array(orphans, dtype=np.int64)])
        )
        return released, roots[naming], live

    def release(self, rows: Rows, ids: Rows) -> None:
        """Give back the per-row memory of GONE rows (ids: of those naming no cluster)."""
        self.ids.release(ids)
        self.metadata.release(rows)
        self.texts.release(rows)

        def gone(at: Rows) -> npt.NDArray[np.bool_]:
            dead: npt.NDArray[np.bool_] = self.state.array[at] == GONE
            return dead

        for column in (self.created, self.timestamp, self.cluster, self.simhash, self.id_hash):
            column.release(rows, gone)
        self.state.release(rows, gone)

    def low_row(self) -> int:
        """The lowest row not GONE: every row below it was tombstoned in every index, so
        a merge starting now drops them all. O(rows it moves past), amortised O(1) a row."""
        state, end = self.state.array, min(self.next_row, len(self.state.array))
        low = self._low_row
        while low < end:
            held = np.flatnonzero(state[low : min(end, low + _LOW_ROW_STEP)])
            if len(held):
                low += int(held[0])
                break
            low = min(end, low + _LOW_ROW_STEP)
        self._low_row = low
        return low

    def _check(self) -> Rows:
        """Assert the bookkeeping (tests): counts, ids, clusters. Returns the LIVE rows."""
        state = self.state.array[: self.next_row]
        live = np.flatnonzero(state == LIVE)
        hidden = np.flatnonzero(state == HIDDEN)
        assert self.visible == len(live), f"visible {self.visible} != {len(live)}"
        assert not len(live) or live[-1] < self.shown_end <= self.next_row, "a row unshown"
        held = {row: self.ids[row] for row in np.concatenate([live, hidden]).tolist()}
        assert all(document_id is not None for document_id in held.values())
        self.row_of._check()
        self.ids._check()
        self.metadata._check()
        named = dict(self.row_of.items())
        for document_id, row in named.items():
            assert state[row] != GONE and held[row] == document_id, (document_id, row)
            assert self.row_of.get(document_id) == row, (document_id, row)
        clusters = self.cluster.array[live]
        assert self.duplicates == int(np.count_nonzero(clusters != live))
        for row, cluster in zip(live.tolist(), clusters.tolist(), strict=True):
            if cluster != row:
                assert row in self.members.rows(cluster).tolist(), (row, cluster)
                assert self.ids[cluster] is not None, f"cluster {cluster} lost its name"
        for cluster in self.members.clusters():
            counted = [r for r in self.members.rows(cluster).tolist() if state[r] != GONE]
            count = self.members.count(cluster)
            assert count == len(counted) > 0, (cluster, count, counted)
        return live
