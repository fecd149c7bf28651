"""``neardup check``: every collection's index segment verified against the database.

A segment passes when its files verify (manifest, sizes, checksums, format, settings),
when the fingerprints it holds of the live documents it covers are those SQLite holds
(SimHash, the exact hash, the MinHash signature's bits the index keeps), and when a
collection started from it passes every index's ``_check`` (each table's keys are those
its rows' fingerprints make, runs sorted, directories right, row books consistent).
Costs what a start costs, plus one read of every fingerprint and the checks' O(entries)
work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.backends.embedded.collection import Collection
from app.backends.embedded.saving import covered_by
from app.backends.embedded.states import GONE
from app.collection_config import CollectionConfig
from app.core.lsh import kept_values
from app.storage.base import DocumentBatch
from app.storage.segments import Segment, SegmentDamaged
from app.storage.sqlite import SQLiteStore

# The columns a segment holds per row, and the stored fingerprint each must equal.
_COLUMNS = (
    ("rows/simhash@rows", "simhash"),
    ("indexes/exact/values@rows", "exact"),
    ("indexes/minhash/values@rows", "minhash"),
)


def check_collection(store: SQLiteStore, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """{"collection", "segment": "ok" | "none" | "damaged", "problem", "rows_below"}."""
    collection = Collection(name, CollectionConfig.from_dict(config), store)
    report: dict[str, Any] = {"collection": name}
    try:
        segment = collection.open_segment()
    except SegmentDamaged as error:
        return {**report, "segment": "damaged", "problem": str(error)}
    if segment is None:
        return {**report, "segment": "none"}
    report["rows_below"] = segment.rows_below
    stored = store.load_collection(name)
    problem = _fingerprint_mismatch(segment, stored.documents)
    if problem is None:
        try:
            collection.restore(store.load_collection(name, covered_by(segment)), segment)
            collection._check()
            below = segment.rows_below
            held = np.flatnonzero(collection._rows.state.array[:below] != GONE)
            if not np.array_equal(held, stored.documents.rows[stored.documents.rows < below]):
                problem = "the documents it holds are not those the database holds"
        except Exception as error:  # a check reports, whatever does not fit
            problem = f"the indexes started from it do not check: {error}"
    if problem is not None:
        return {**report, "segment": "damaged", "problem": problem}
    return {**report, "segment": "ok", "documents": len(collection)}


def _fingerprint_mismatch(segment: Segment, documents: DocumentBatch) -> str | None:
    covered = documents.rows[documents.rows < segment.rows_below]
    for saved_name, stored_name in _COLUMNS:
        saved = segment.arrays.get(saved_name)
        if saved is None:
            if saved_name.startswith("indexes/minhash"):
                continue  # MinHash off
            return f"it has no {saved_name}"
        if len(saved) < (int(covered[-1]) + 1 if len(covered) else 0):
            return f"{saved_name} holds {len(saved)} rows, fewer than it covers"
        stored = getattr(documents, stored_name)[: len(covered)]
        if stored_name == "minhash" and saved.dtype == np.uint16:  # the kept bits only
            stored = kept_values(stored)
        differ = np.flatnonzero((saved[covered] != stored).reshape(len(covered), -1).any(axis=1))
        if len(differ):
            return f"{stored_name} of row {int(covered[differ[0]])} differs from the database's"
    return None


def check_store(store: SQLiteStore) -> list[dict[str, Any]]:
    """The report of every collection of the database."""
    return [
        check_collection(store, name, config)
        for name, config in sorted(store.collection_configs().items())
    ]
