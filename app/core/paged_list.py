"""Python objects by row number, in pages that are dropped once every row in them is
gone; a page may also be packed (its objects encoded in one byte string), as a segment
saves it and a restart adopts it: no Python object a row until one is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from app.core.row_array import sorted_unique
from app.core.saved import SavedArrays, SavedStateError, wanted

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How a PagedList's objects are packed: encode never returns b"" (an empty slot)."""

    encode: Callable[[T], bytes]
    decode: Callable[[bytes], T]


@dataclass(slots=True)
class PackedPage:
    """One page's objects encoded end to end in ``data``: slot i is data[start:ends[i]],
    start being ends[i - 1] (``first`` for slot 0); an empty slot is None, and so is a
    released one. The bytes never change: a release marks its slots (a mask made at the
    first), an assignment unpacks the page first."""

    data: npt.NDArray[np.uint8]
    ends: npt.NDArray[np.int64]
    first: int
    released: npt.NDArray[np.bool_] | None = None

    def bounds(self, slot: int) -> tuple[int, int]:
        if slot >= len(self.ends) or (self.released is not None and self.released[slot]):
            return 0, 0
        return (int(self.ends[slot - 1]) if slot else self.first), int(self.ends[slot])

    def lengths(self) -> npt.NDArray[np.int64]:
        """Each slot's bytes (0: empty)."""
        lengths: npt.NDArray[np.int64] = np.diff(self.ends, prepend=self.first)
        return lengths

    def held(self) -> int:
        present = self.lengths() > 0
        if self.released is not None:
            present &= ~self.released
        return int(np.count_nonzero(present))

    def release(self, slots: npt.NDArray[np.int64]) -> int:
        """Release slots; returns how many held an object."""
        if self.released is None:
            self.released = np.zeros(len(self.ends), dtype=np.bool_)
        slots = slots[slots < len(self.ends)]  # the last page may be short
        held = (self.lengths()[slots] > 0) & ~self.released[slots]
        self.released[slots[held]] = True
        return int(np.count_nonzero(held))

    def saved(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """(bytes, lengths) of the objects held."""
        lengths = self.lengths()
        data = self.data[self.first : int(self.ends[-1])]
        if self.released is None or not self.released.any():
            return data, lengths
        kept = ~self.released
        return data[np.repeat(kept, lengths)], np.where(kept, lengths, 0)


class PackedStrings(Sequence[str]):
    """Strings end to end in UTF-8 (lone surrogates passed): string i is
    ``data[ends[i - 1]:ends[i]]`` (``first`` for string 0). Its text and 8 bytes a string,
    where a list of Python strings costs some 70 beside the text: how a restart reads its
    ids (a PagedList of ids takes them as packed pages, without a Python string each).
    Read one at a time, decoded; a slice of step 1 is a view. Never empty strings."""

    __slots__ = ("data", "ends", "first")

    def __init__(self, data: npt.NDArray[np.uint8], ends: npt.NDArray[np.int64], first: int = 0):
        self.data = data
        self.ends = ends
        self.first = first

    @staticmethod
    def of(strings: Sequence[str]) -> PackedStrings:
        data, lengths = _encoded(strings, _encode_text)
        return PackedStrings(data, np.cumsum(lengths))

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> PackedStrings: ...

    def __getitem__(self, index: int | slice) -> str | PackedStrings:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.ends))
            if step != 1:
                raise ValueError("PackedStrings slices have a step of 1")
            stop = max(start, stop)
            first = self.first if start == 0 else int(self.ends[start - 1])
            return PackedStrings(self.data, self.ends[start:stop], first)
        if not -len(self.ends) <= index < len(self.ends):
            raise IndexError(f"string {index} of {len(self.ends)}")
        if index < 0:
            index += len(self.ends)
        start = self.first if index == 0 else int(self.ends[index - 1])
        return _decode_text(self.data[start : int(self.ends[index])].tobytes())

    def encoded(self, batch: int = 1 << 16) -> Iterator[bytes]:
        """Each string's UTF-8 bytes, ``batch`` strings' bytes copied out at a time."""
        for at in range(0, len(self.ends), batch):
            ends = self.ends[at : at + batch]
            start = self.first if at == 0 else int(self.ends[at - 1])
            blob = self.data[start : int(ends[-1])].tobytes()
            previous = 0
            for end in (ends - start).tolist():
                yield blob[previous:end]
                previous = end

    def __iter__(self) -> Iterator[str]:
        return (_decode_text(encoded) for encoded in self.encoded())

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same strings (a list of ids, as other loads give)."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside: not hashable


class PagedList(Generic[T]):
    """Python objects by row number, in pages of PAGE_ROWS slots; a page is allocated when
    its first object is set and dropped when its last one is released, so rows that are
    None or gone cost nothing once their page is empty (8 bytes a slot while it is not).
    With a codec, a list can be saved (``saved``) and adopted packed (``adopt_saved``):
    an adopted page stays packed (its encoded bytes and 8 bytes a slot) until a row of
    it is assigned or released, which unpacks that page.

    Reads take no lock: a released slot (or a dropped page) reads as None. One writer.
    Costs: get O(1) (a decode on a packed page); assign and release O(rows) plus O(1)
    per page touched (O(PAGE_ROWS) decodes to unpack one).

    A page is a numpy array of objects, not a list: the garbage collector does not look
    into it, where lists made every full collection visit each object held (a stall that
    grows with the ids held; ids, metadata and texts hold no reference back, so no cycle
    goes through a page).

    >>> names = PagedList[str]()
    >>> names.assign(np.array([0, 5000]), ["a", "b"])
    >>> names[5000], names[7], names.release(np.array([5000])), names[5000]
    ('b', None, 1, None)
    """

    PAGE_ROWS = 4096
    _SHIFT = 12

    def __init__(self, codec: Codec[T] | None = None) -> None:
        self._codec = codec
        self._pages: list[npt.NDArray[np.object_] | PackedPage | None] = []
        self._held: list[int] = []  # objects (not None) per page
        self._packed_below = 0  # pages below this one are packed or empty (pack_next)

    def __getitem__(self, row: int) -> T | None:
        page_number = row >> self._SHIFT
        if page_number >= len(self._pages):
            return None
        page = self._pages[page_number]
        if page is None:
            return None
        slot = row & (self.PAGE_ROWS - 1)
        if isinstance(page, PackedPage):
            start, end = page.bounds(slot)
            if start == end:
                return None
            assert self._codec is not None
            return self._codec.decode(page.data[start:end].tobytes())
        return cast("T | None", page[slot])

    def get_many(self, rows: Sequence[int]) -> list[T | None]:
        """The objects of rows; a run of consecutive rows in one page is one slice."""
        if len(rows) > 1 and rows[-1] - rows[0] == len(rows) - 1:
            first, last = rows[0], rows[-1]
            if first >> self._SHIFT == last >> self._SHIFT:
                number = first >> self._SHIFT
                page = self._pages[number] if number < len(self._pages) else None
                mask = self.PAGE_ROWS - 1
                if page is None:
                    return [None] * len(rows)
                if not isinstance(page, PackedPage):
                    return cast("list[T | None]", page[first & mask : (last & mask) + 1].tolist())
        return [self[row] for row in rows]

    def assign(self, rows: npt.NDArray[np.integer], values: Sequence[T | None]) -> None:
        """Set the objects of rows (a None value sets nothing: it reads as None anyway).
        A run of consecutive rows in one page without None is set with one slice."""
        numbers = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(numbers) != len(values):
            raise ValueError("one value a row")
        if isinstance(values, PackedStrings) and self._codec is TEXT_CODEC:
            self._assign_packed(numbers, values)
            return
        if len(numbers) > 1 and numbers[-1] - numbers[0] == len(numbers) - 1:
            first, last = int(numbers[0]), int(numbers[-1])
            if first >> self._SHIFT == last >> self._SHIFT and None not in values:
                page, number = self._page(first >> self._SHIFT), first >> self._SHIFT
                mask = self.PAGE_ROWS - 1
                self._held[number] += page[first & mask : (last & mask) + 1].tolist().count(None)
                # fromiter: each value one object (a slice assignment would unpack lists)
                page[first & mask : (last & mask) + 1] = np.fromiter(
                    values, dtype=object, count=len(values)
                )
                return
        mask = self.PAGE_ROWS - 1
        for row, value in zip(numbers.tolist(), values, strict=True):
            if value is None:
                continue
            page = self._page(row >> self._SHIFT)
            if page[row & mask] is None:
                self._held[row >> self._SHIFT] += 1
            page[row & mask] = value

    def _assign_packed(self, rows: npt.NDArray[np.int64], values: PackedStrings) -> None:
        """``assign`` of packed strings to ascending rows: each page none of whose rows
        is set yet becomes a packed page over the strings' bytes (no copy, no Python
        string); the strings of a page holding objects already are assigned one by one.
        O(pages + rows) in numpy."""
        if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])):
            raise ValueError("packed strings are assigned to ascending rows")
        numbers = rows >> self._SHIFT
        bounds = [0, *(np.flatnonzero(np.diff(numbers)) + 1).tolist(), len(rows)]
        mask = self.PAGE_ROWS - 1
        ends = values.ends
        for start, stop in itertools.pairwise(bounds):
            if start == stop:
                continue
            number = int(numbers[start])
            group = rows[start:stop]
            if number < len(self._pages) and self._pages[number] is not None:
                decoded = cast("list[T | None]", list(values[start:stop]))
                self.assign(group, decoded)
                continue
            while number >= len(self._pages):
                self._pages.append(None)
                self._held.append(0)
            first = values.first if start == 0 else int(ends[start - 1])
            lengths = np.zeros(self.PAGE_ROWS, dtype=np.int64)
            lengths[group & mask] = np.diff(ends[start:stop], prepend=first)
            self._pages[number] = PackedPage(values.data, first + np.cumsum(lengths), first)
            self._held[number] = stop - start

    def _page(self, number: int) -> npt.NDArray[np.object_]:
        """The page of that number, allocated (empty) or unpacked if it is not."""
        pages = self._pages
        while number >= len(pages):
            pages.append(None)
            self._held.append(0)
        page = pages[number]
        if page is None:
            page = pages[number] = np.full(self.PAGE_ROWS, None, dtype=object)
            self._packed_below = min(self._packed_below, number)
        elif isinstance(page, PackedPage):
            page = pages[number] = self._unpacked(page)
            self._packed_below = min(self._packed_below, number)
        return page

    def pack_next(self, rows_below: int) -> bool:
        """Pack the first page of Python objects whose rows all lie below ``rows_below``
        (a page no insert writes again): its objects encoded end to end, as a segment
        keeps them, about 8 bytes a row beside their bytes where a Python string costs
        some 60. Reads decode them (as after a start from a segment); an assignment
        unpacks the page again. False when no such page is left. O(objects of the page),
        O(1) amortised over pages already packed."""
        if self._codec is None:
            raise ValueError("only a PagedList with a codec is packed")
        full = min(len(self._pages), rows_below >> self._SHIFT)
        while self._packed_below < full:
            number = self._packed_below
            self._packed_below += 1
            page = self._pages[number]
            if page is not None and not isinstance(page, PackedPage):
                data, lengths = _encoded(page.tolist(), self._codec.encode)
                # Readers holding the unpacked page still read it: it is not changed.
                self._pages[number] = PackedPage(data, np.cumsum(lengths), 0)
                return True
        return False

    def _unpacked(self, page: PackedPage) -> npt.NDArray[np.object_]:
        assert self._codec is not None
        objects = np.full(self.PAGE_ROWS, None, dtype=object)
        data, decode = page.data, self._codec.decode
        start = page.first
        released = page.released
        for slot, end in enumerate(page.ends.tolist()):
            if end != start and (released is None or not released[slot]):
                objects[slot] = decode(data[start:end].tobytes())
            start = end
        return objects

    def release(self, rows: npt.NDArray[np.integer]) -> int:
        """Forget the objects of rows; returns how many were held. A run of consecutive
        rows in one page is cleared with one slice assignment."""
        rows = sorted_unique(rows)
        if not len(rows):
            return 0
        mask = self.PAGE_ROWS - 1
        pages, held = self._pages, self._held
        numbers = rows >> self._SHIFT
        bounds = np.flatnonzero(np.diff(numbers)) + 1
        released = 0
        for group in np.split(rows, bounds):
            number = int(group[0]) >> self._SHIFT
            if number >= len(pages) or pages[number] is None:
                continue
            page = pages[number]
            if isinstance(page, PackedPage):
                count = page.release(group & mask)
                released += count
                held[number] -= count
                if count and held[number] == 0:
                    pages[number] = None
                continue
            assert page is not None
            first, last = int(group[0]) & mask, int(group[-1]) & mask
            if last - first + 1 == len(group):  # consecutive: one slice
                count = len(group) - page[first : last + 1].tolist().count(None)
                page[first : last + 1] = None
            else:
                count = 0
                for row in group.tolist():
                    if page[row & mask] is not None:
                        page[row & mask] = None
                        count += 1
            released += count
            held[number] -= count
            if count and held[number] == 0:
                pages[number] = None  # readers holding the page still read it safely
        return released

    @property
    def held(self) -> int:
        """Objects held (not None)."""
        return sum(self._held)

    @property
    def pages(self) -> int:
        """Pages allocated (8 bytes a slot each)."""
        return sum(page is not None for page in self._pages)

    # ------------------------------------------------------------------ segments

    def saved(self, rows: int) -> Callable[[], SavedArrays]:
        """Rows 0 .. rows - 1 for a segment, in two steps: this call (under the writer's
        lock) takes the pages, O(pages) plus a copy of the slots of unpacked ones; the
        function it returns (no lock needed) encodes them, O(objects of unpacked pages):
        ``data`` (every object's bytes end to end) and ``ends`` (where each row's ends)."""
        if self._codec is None:
            raise ValueError("only a PagedList with a codec is saved")
        encode = self._codec.encode
        count = -(-rows // self.PAGE_ROWS)
        taken = [self._taken(page) for page in self._pages[:count]]
        taken += [None] * (count - len(taken))

        def encoded() -> SavedArrays:
            parts: list[npt.NDArray[np.uint8]] = []
            lengths: list[npt.NDArray[np.int64]] = []
            for page in taken:
                if page is None:
                    lengths.append(np.zeros(self.PAGE_ROWS, dtype=np.int64))
                elif isinstance(page, PackedPage):
                    data, sizes = page.saved()
                    parts.append(data)
                    lengths.append(np.pad(sizes, (0, self.PAGE_ROWS - len(sizes))))  # short last
                else:
                    data, sizes = _encoded(page.tolist(), encode)
                    parts.append(data)
                    lengths.append(sizes)
            ends = np.cumsum(np.concatenate(lengths)) if lengths else np.zeros(0, np.int64)
            data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
            return {"data": data, "ends": ends[:rows]}

        return encoded

    @staticmethod
    def _taken(
        page: npt.NDArray[np.object_] | PackedPage | None,
    ) -> npt.NDArray[np.object_] | PackedPage | None:
        """A page as it is now (a release later does not change it)."""
        if page is None:
            return None
        if isinstance(page, PackedPage):
            mask = None if page.released is None else page.released.copy()
            return PackedPage(page.data, page.ends, page.first, mask)
        return page.copy()

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Hold what ``saved`` wrote, each page packed (views of the arrays, no copy).
        O(pages). SavedStateError where the arrays do not fit together."""
        if self._codec is None:
            raise ValueError("only a PagedList with a codec adopts saved pages")
        if self._pages:
            raise ValueError("only an empty PagedList adopts saved pages")
        data, ends = wanted(arrays, "data"), wanted(arrays, "ends")
        if data.dtype != np.uint8 or ends.dtype != np.int64 or ends.ndim != 1:
            raise SavedStateError("saved objects are not bytes and int64 ends")
        lengths = np.diff(ends, prepend=0)
        if len(ends) and (int(ends[-1]) != len(data) or bool(np.any(lengths < 0))):
            raise SavedStateError("saved objects' ends do not fit their bytes")
        # Objects a page holds, for every page at once (a per-page count in Python is a
        # loop over every page at a restart).
        present = lengths > 0
        starts = np.arange(0, len(ends), self.PAGE_ROWS)
        counts = np.add.reduceat(present, starts).tolist() if len(ends) else []
        first = 0
        for start, held in zip(starts.tolist(), counts, strict=True):
            page = PackedPage(data, ends[start : start + self.PAGE_ROWS], first)
            first = int(page.ends[-1])
            self._pages.append(page if held else None)
            self._held.append(int(held))

    def _check(self) -> None:
        for page, held in zip(self._pages, self._held, strict=True):
            if page is None:
                assert held == 0
            elif isinstance(page, PackedPage):
                assert held == page.held() > 0
            else:
                assert held == len(page) - page.tolist().count(None) > 0


def _encoded(
    values: Sequence[Any], encode: Callable[[Any], bytes]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """(every value's bytes end to end, each one's length): how pages and strings are
    packed; None is an empty slot (0 bytes)."""
    blobs = [b"" if value is None else encode(value) for value in values]
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    return np.frombuffer(b"".join(blobs), dtype=np.uint8), lengths


def _encode_text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


TEXT_CODEC: Codec[str] = Codec(_encode_text, _decode_text)


def json_codec(dumps: Callable[[Any], str], loads: Callable[[str], Any]) -> Codec[Any]:
    """Objects packed as JSON (``dumps`` must never give an empty string)."""
    return Codec(lambda value: dumps(value).encode(), lambda data: loads(data.decode()))
