"""A row's state, one byte per row (given back by pages, like the other per-row columns).
GONE is 0, what a released page reads as: rows never used are GONE too."""

GONE, LIVE, HIDDEN = 0, 1, 2  # HIDDEN: expired, not evicted yet; GONE: out of memory
# Held by some indexes and not others, under the write lock: a row entering the indexes
# (published) or leaving them (deleted, replaced, evicted). Reads take no lock and return
# LIVE rows only, so a document turns visible and invisible in one step, never found by
# one index and missed by another.
MOVING = 3
