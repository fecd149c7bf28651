"""Index segments on disk: what a collection's indexes hold, written beside the database
so that a start maps it instead of rebuilding every index from the documents.

SQLite stays the source of truth. A segment is a snapshot of the indexes that covers
every row below ``rows_below`` (rows are numbered in insertion order and never reused);
a start maps it and replays only the database's rows from ``rows_below`` on, and the rows
below it that the database no longer holds (deleted, evicted) are tombstoned.

Layout, one directory per collection (its name in hex, so any name is a safe path)::

    segments/<hex name>/manifest.json       the commit point: names every file
    segments/<hex name>/g<generation>-<n>.bin   one array each, its raw bytes

The manifest holds the format version, the hash of the collection's fixed settings, the
rows it covers, and per array its dtype, shape, size and xxh3-64 checksum; the manifest
carries its own checksum too. A write puts every array in new files of the next
generation, fsyncs them and the directory, writes the manifest to a temporary name,
fsyncs it, renames it over the old one and fsyncs the directory again; only then are the
files of older generations removed. A crash at any step leaves either the old manifest
with all its files, or the new one with all of its own. Anything that does not verify
(a missing or short file, a checksum, another format or other settings) raises
SegmentDamaged: the caller rebuilds that collection from the database.

Reading: per-row columns (names ending in ROWS_SUFFIX) are read into memory a RowArray
adopts (they keep growing in place); every other array (sorted runs, which are never
written once made) is mapped copy-on-write from its file, and verified through the
mapping, which also brings its pages in before the first query. ``neardup serve`` does
all of that ahead, in a thread beside its imports (app/storage/read_ahead.py); the open
then takes the arrays it made.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from app.core.reservations import reserved_rows, reserved_rows_of_file
from app.core.saved import ROWS_SUFFIX, SavedArrays
from app.storage.read_ahead import ReadAhead

log = logging.getLogger("neardup")

FORMAT_VERSION = 2  # 2: the per-row records (ids, metadata, times, clusters) too
MANIFEST = "manifest.json"
_CHUNK_BYTES = 1 << 24  # written this much at a time
# Read and hashed this much per call, without the GIL. Large: between two calls a thread
# waits for the GIL, up to the 5 ms switch interval while another holds it (the imports,
# beside a read-ahead), which with calls of a few MB left it idle most of the time
# (docs/journal.md, "Issue 27").
READ_CHUNK_BYTES = 1 << 30
# The steps of a write, in order; a test may kill the process at any of them.
WRITE_STEPS = ("files", "files-synced", "manifest", "renamed", "done")


class SegmentDamaged(Exception):
    """A segment that must not be used: rebuild from the database."""


def segments_beside(database: Path) -> Path:
    """Where the segments of a database are kept: next to it, named like it."""
    return database.with_suffix(".segments")


def settings_hash(fixed_settings: dict[str, Any]) -> str:
    """The hash a segment is valid for: that of the settings an index is built by."""
    text = json.dumps(fixed_settings, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(text.encode())


@dataclass(frozen=True, slots=True)
class Segment:
    """A verified segment: every row below ``rows_below`` as the indexes held it."""

    rows_below: int
    generation: int
    arrays: SavedArrays
    nbytes: int


@dataclass(frozen=True, slots=True)
class Written:
    generation: int
    rows_below: int
    nbytes: int
    files: int
    seconds: float


def _contiguous_bytes(array: npt.NDArray[Any]) -> memoryview:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return flat.data


def _manifest_text(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class SegmentStore:
    """The segments of every collection of one database, under ``root``.

    ``fail_at`` (tests) kills the process with SIGKILL at that step of every write
    (WRITE_STEPS), as a crash or an out-of-memory kill would."""

    def __init__(self, root: Path, fail_at: str | None = None) -> None:
        if fail_at is not None and fail_at not in WRITE_STEPS:
            raise ValueError(f"fail_at must be one of {WRITE_STEPS}")
        self.root = root
        self._fail_at = fail_at
        self._ahead: ReadAhead[npt.NDArray[Any]] | None = None

    def read_ahead(self) -> ReadAhead[npt.NDArray[Any]]:
        """Start reading and verifying every segment file now, in a thread, so that the
        open finds that done (app/storage/read_ahead.py: why)."""
        if self._ahead is None:
            self._ahead = ReadAhead(self._files_in_open_order())
        return self._ahead

    def end_read_ahead(self) -> None:
        """The start is over: drop what was read ahead and not taken (a segment refused
        after it was read), and stop reading."""
        if self._ahead is not None:
            self._ahead.close()

    def _files_in_open_order(
        self,
    ) -> Iterator[tuple[Path, Callable[[Path], npt.NDArray[Any]]]]:
        """Every file of every verified manifest with what to do with it, in the order a
        start opens them: collections by name (hex names sort as their UTF-8 bytes, as
        SQLite orders the names), each one's arrays in manifest order."""
        if not self.root.is_dir():
            return
        for directory in sorted(self.root.iterdir()):
            try:
                body = self.manifest(bytes.fromhex(directory.name).decode())
            except (ValueError, SegmentDamaged):
                continue  # not one of ours, or damaged: the open says so
            for name, entry in (body or {}).get("arrays", {}).items():
                if isinstance(entry, dict) and "file" in entry:
                    yield (
                        directory / str(entry["file"]),
                        partial(_read_array, name=name, entry=entry),
                    )

    def directory(self, collection: str) -> Path:
        return self.root / collection.encode().hex()

    def _step(self, name: str) -> None:
        if self._fail_at == name:
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------------ writes

    def write(
        self, collection: str, settings: str, rows_below: int, arrays: SavedArrays
    ) -> Written:
        """Write a new generation of the collection's segment and make it current.
        O(bytes); the arrays must not change meanwhile (runs never do; a per-row column
        is not written below its size)."""
        started = time.perf_counter()
        directory = self.directory(collection)
        directory.mkdir(parents=True, exist_ok=True)
        generation = self._next_generation(directory)
        try:
            return self._write(
                directory, generation, collection, settings, rows_below, arrays, started
            )
        except OSError:
            # A full disk, say: before the rename, this generation's files go and the
            # current one stays; after it, they are the current one.
            try:
                current = (self.manifest(collection) or {}).get("generation")
            except SegmentDamaged:
                current = None
            if current != generation:
                for path in directory.glob(f"g{generation:08d}-*.bin"):
                    path.unlink(missing_ok=True)
                (directory / (MANIFEST + ".tmp")).unlink(missing_ok=True)
            raise

    def _write(
        self,
        directory: Path,
        generation: int,
        collection: str,
        settings: str,
        rows_below: int,
        arrays: SavedArrays,
        started: float,
    ) -> Written:
        entries: dict[str, dict[str, Any]] = {}
        total = 0
        for number, (name, array) in enumerate(sorted(arrays.items())):
            file_name = f"g{generation:08d}-{number:04d}.bin"
            checksum, size = _write_file(directory / file_name, array)
            entries[name] = {
                "file": file_name,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "bytes": size,
                "xxh3": checksum,
            }
            total += size
        self._step("files")
        for entry in entries.values():
            _fsync_path(directory / entry["file"])
        _fsync_path(directory)
        self._step("files-synced")
        body = {
            "format": FORMAT_VERSION,
            "collection": collection,
            "settings": settings,
            "rows_below": rows_below,
            "generation": generation,
            "written_at": time.time(),
            "arrays": entries,
        }
        text = _manifest_text(body)
        manifest = {"body": body, "xxh3": xxhash.xxh3_64_hexdigest(text.encode())}
        temporary = directory / (MANIFEST + ".tmp")
        with open(temporary, "w") as file:
            json.dump(manifest, file)
            file.flush()
            os.fsync(file.fileno())
        self._step("manifest")
        os.replace(temporary, directory / MANIFEST)
        self._step("renamed")
        _fsync_path(directory)
        keep = {entry["file"] for entry in entries.values()} | {MANIFEST}
        for path in directory.iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)
        self._step("done")
        return Written(generation, rows_below, total, len(entries), time.perf_counter() - started)

    def _next_generation(self, directory: Path) -> int:
        """One past every generation named in the directory (its files or manifest)."""
        highest = 0
        for path in directory.iterdir():
            if path.name.startswith("g") and "-" in path.name:
                try:
                    highest = max(highest, int(path.name[1:].split("-", 1)[0]))
                except ValueError:
                    continue
        return highest + 1

    def remove(self, collection: str) -> None:
        """Forget the collection's segment (dropped, or damaged: rebuilt from SQLite)."""
        directory = self.directory(collection)
        if not directory.exists():
            return
        manifest = directory / MANIFEST
        manifest.unlink(missing_ok=True)  # first: a crash midway leaves no segment
        _fsync_path(directory)
        for path in directory.iterdir():
            path.unlink(missing_ok=True)
        directory.rmdir()

    def remove_others(self, collections: set[str]) -> None:
        """Remove the segments of collections not among these (dropped meanwhile)."""
        if not self.root.exists():
            return
        keep = {self.directory(name).name for name in collections}
        for directory in self.root.iterdir():
            if directory.is_dir() and directory.name not in keep:
                try:
                    name = bytes.fromhex(directory.name).decode()
                except ValueError:
                    continue  # not one of ours
                self.remove(name)

    # ------------------------------------------------------------------ reads

    def manifest(self, collection: str) -> dict[str, Any] | None:
        """The verified manifest of the collection's segment; None where it has none.
        SegmentDamaged where it cannot be read or its checksum fails."""
        path = self.directory(collection) / MANIFEST
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            manifest = json.loads(raw)
            body = manifest["body"]
            checksum = manifest["xxh3"]
        except (ValueError, KeyError, TypeError) as error:
            raise SegmentDamaged(f"the manifest cannot be read ({error})") from error
        if xxhash.xxh3_64_hexdigest(_manifest_text(body).encode()) != checksum:
            raise SegmentDamaged("the manifest's checksum does not match")
        if body.get("format") != FORMAT_VERSION:
            raise SegmentDamaged(
                f"format version {body.get('format')!r}, this version reads {FORMAT_VERSION}"
            )
        if body.get("collection") != collection:
            raise SegmentDamaged(f"the manifest names {body.get('collection')!r}")
        return dict(body)

    def open(self, collection: str, settings: str) -> Segment | None:
        """The collection's segment, every array verified; None where there is none.
        SegmentDamaged where anything is wrong. O(bytes)."""
        body = self.manifest(collection)
        if body is None:
            return None
        if body["settings"] != settings:
            raise SegmentDamaged("written under other settings")
        directory = self.directory(collection)
        arrays: SavedArrays = {}
        total = 0
        for name, entry in body["arrays"].items():
            path = directory / str(entry["file"])
            ahead = None if self._ahead is None else self._ahead.take(path)
            arrays[name] = ahead if ahead is not None else _read_array(path, name, entry)
            total += int(entry["bytes"])
        return Segment(int(body["rows_below"]), int(body["generation"]), arrays, total)


def _write_file(path: Path, array: npt.NDArray[Any]) -> tuple[str, int]:
    """Write an array's bytes; (xxh3-64, size). Not synced: the caller syncs every file."""
    data = _contiguous_bytes(array)
    hasher = xxhash.xxh3_64()
    with open(path, "wb") as file:
        for start in range(0, len(data), _CHUNK_BYTES):
            chunk = data[start : start + _CHUNK_BYTES]
            hasher.update(chunk)
            file.write(chunk)
    return hasher.hexdigest(), len(data)


def _fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a manifest entry says of its array."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    size: int
    checksum: str

    @classmethod
    def of(cls, name: str, entry: dict[str, Any]) -> _Layout:
        try:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(size) for size in entry["shape"])
            layout = cls(dtype, shape, int(entry["bytes"]), str(entry["xxh3"]))
        except (KeyError, TypeError, ValueError) as error:
            raise SegmentDamaged(f"{name}: a manifest entry cannot be read ({error})") from error
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != layout.size:
            raise SegmentDamaged(f"{name}: {layout.size} bytes cannot hold {dtype}{shape}")
        return layout

    @property
    def wide(self) -> bool:
        """Rows of 16 bytes or more (signatures, exact hashes): a per-row column of them
        is mapped, not read (their released rows are never read again, so reading the
        file back is fine); narrower columns are read into memory (the books' flags of
        released rows are read, as zeros)."""
        row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        return len(self.shape) > 1 and row_bytes >= 16


def _read_array(path: Path, name: str, entry: dict[str, Any]) -> npt.NDArray[Any]:
    """The array of one manifest entry, verified (SegmentDamaged otherwise): a per-row
    column read into memory (or mapped over its reservation, where wide), anything else
    mapped copy-on-write; either way hashed through the memory it will be read from,
    which also brings in the pages the first queries read. O(bytes), without the GIL but
    between calls of READ_CHUNK_BYTES."""
    layout = _Layout.of(name, entry)
    try:
        actual = path.stat().st_size
    except FileNotFoundError as error:
        raise SegmentDamaged(f"{name}: its file {path.name} is missing") from error
    if actual != layout.size:
        raise SegmentDamaged(f"{name}: {path.name} holds {actual} bytes, not {layout.size}")
    if name.endswith(ROWS_SUFFIX):
        with open(path, "rb", buffering=0) as file:
            mapped = None
            if layout.wide:
                with contextlib.suppress(OSError):
                    mapped = reserved_rows_of_file(
                        file, layout.shape[0], layout.shape[1:], layout.dtype.type
                    )
            if mapped is not None:
                array = mapped
                checksum = _hashed(array.reshape(-1).view(np.uint8).data, None)
            else:
                array, checksum = _read_column(name, layout, file.readinto)
    elif layout.size == 0:
        array = np.zeros(layout.shape, layout.dtype)
        checksum = xxhash.xxh3_64_hexdigest(b"")
    else:
        with open(path, "rb") as file:
            mapping = mmap.mmap(file.fileno(), layout.size, access=mmap.ACCESS_COPY)
        checksum = _hashed(memoryview(mapping), None)
        array = np.frombuffer(mapping, dtype=layout.dtype).reshape(layout.shape)
    if checksum != layout.checksum:
        raise SegmentDamaged(f"{name}: the checksum does not match")
    return array


def _read_column(
    name: str, layout: _Layout, read_into: Callable[[memoryview], int | None]
) -> tuple[npt.NDArray[Any], str]:
    """A per-row column read into a reservation a RowArray adopts; (array, its xxh3-64)."""
    shape = layout.shape
    array = (
        reserved_rows(shape[0], shape[1:], layout.dtype.type, filled_at_once=True)
        if shape
        else np.zeros(shape, layout.dtype)
    )
    try:
        checksum = _hashed(array.reshape(-1).view(np.uint8).data, read_into)
    except EOFError as error:
        raise SegmentDamaged(f"{name}: its file ended early") from error
    return array, checksum


def _hashed(target: memoryview, read_into: Callable[[memoryview], int | None] | None) -> str:
    """The xxh3-64 of ``target``, chunk by chunk (each filled first with ``read_into`` if
    given; EOFError where it ends early). O(bytes)."""
    hasher = xxhash.xxh3_64()
    for start in range(0, len(target), READ_CHUNK_BYTES):
        chunk = target[start : start + READ_CHUNK_BYTES]
        if read_into is not None:
            filled = 0
            while filled < len(chunk):
                count = read_into(chunk[filled:])
                if not count:
                    raise EOFError
                filled += count
        hasher.update(chunk)
    return hasher.hexdigest()
