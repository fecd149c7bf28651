"""Array types shared by the core, named once."""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

ShingleHashes: TypeAlias = npt.NDArray[np.uint64]
SimHashes: TypeAlias = npt.NDArray[np.uint64]
MinHashes: TypeAlias = npt.NDArray[np.uint32]
ExactHashes: TypeAlias = npt.NDArray[np.uint64]
Keys: TypeAlias = npt.NDArray[np.uint64]
Rows: TypeAlias = npt.NDArray[np.int64]
Floats: TypeAlias = npt.NDArray[np.float64]


class Backlog(NamedTuple):
    """An index's work for its next merge."""

    unmerged_entries: int  # table entries outside the main sorted run
    tombstones: int  # deleted rows the tables still hold
