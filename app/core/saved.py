"""What an index keeps, as named arrays: the contents of an index segment on disk
(app/storage/segments.py writes and maps them; the indexes make and adopt them here, with
no I/O).

Names are paths ("minhash/table/main.keys"): each part of an index nests its own arrays
under its name. A name ending in ROWS_SUFFIX is a per-row column (a RowArray) that keeps
growing in place after a restart: the store loads it into memory a RowArray can adopt
(``reserved_rows``). Any other array is immutable once made (a sorted run): the store maps
it from the file, copy-on-write, and nothing is copied at a start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

SavedArrays: TypeAlias = dict[str, npt.NDArray[Any]]
ROWS_SUFFIX = "@rows"


class SavedStateError(ValueError):
    """Arrays that do not fit what adopts them: the segment is not this index's."""


def nested(prefix: str, arrays: Mapping[str, npt.NDArray[Any]]) -> SavedArrays:
    """``arrays`` under ``prefix/``."""
    return {f"{prefix}/{name}": array for name, array in arrays.items()}


def part(arrays: Mapping[str, npt.NDArray[Any]], prefix: str) -> SavedArrays:
    """The arrays under ``prefix/``, the prefix taken off their names."""
    start = f"{prefix}/"
    return {name[len(start) :]: array for name, array in arrays.items() if name.startswith(start)}


def wanted(arrays: Mapping[str, npt.NDArray[Any]], name: str) -> npt.NDArray[Any]:
    """The array called ``name``; SavedStateError when it is missing."""
    array = arrays.get(name)
    if array is None:
        raise SavedStateError(f"the saved arrays have no {name!r}")
    return array


def scalars(values: list[int]) -> npt.NDArray[np.int64]:
    """Counters saved beside the arrays, as one small array."""
    return np.array(values, dtype=np.int64)


def read_scalars(arrays: Mapping[str, npt.NDArray[Any]], name: str, count: int) -> list[int]:
    array = wanted(arrays, name)
    if array.shape != (count,):
        raise SavedStateError(f"{name!r} holds {array.shape}, not {count} counters")
    return [int(value) for value in array.tolist()]
