"""The data structures and compiled kernels of near-duplicate search, with no I/O.

Importing the package makes numba's on-disk cache safe for processes compiling at once
(app/core/kernel_cache.py): every process that runs a kernel imports it first.
"""

from app.core.kernel_cache import serialize_saves

serialize_saves()
