"""A row's state, one byte per row (given back by pages, like the other per-row columns).
GONE is 0, what a released page reads as: rows never used are GONE too."""

GONE, LIVE, HIDDEN = 0, 1, 2  # HIDDEN: expired, not evicted yet; GONE: out of memory
