"""MurmurHash3's 64-bit finaliser over numpy arrays (the kernels' ``fmix64``, vectorised):
a bijection of uint64 in which every input bit affects every output bit."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def fmix64_array(values: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """``fmix64`` of each value, as a new array (the input is left as it is). O(n)."""
    mixed = np.array(values, dtype=np.uint64)
    mixed ^= mixed >> np.uint64(33)
    mixed *= np.uint64(0xFF51AFD7ED558CCD)
    mixed ^= mixed >> np.uint64(33)
    mixed *= np.uint64(0xC4CEB93F40A6BEC5)
    mixed ^= mixed >> np.uint64(33)
    return mixed
