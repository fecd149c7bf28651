"""Compiled loops that choose a passage search's candidates before any is verified
(numba, nogil): a batch's pairs of documents holding a fingerprint, the count bound a
candidate must pass to cover a bar (``covers``), an index lookup's hits counted per
candidate, and the rule of a site's chrome (app/core/hosts.py). The verification itself
is in ``_passage_kernels.py``."""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._shared_kernels import first_above

_U64 = np.uint64


@njit(cache=True, nogil=True)
def holder_pairs(
    owners: np.ndarray, group_starts: np.ndarray, max_holders: int, texts: int
) -> tuple[np.ndarray, np.ndarray]:
    """(pair codes, boilerplate) of texts' fingerprints sorted by key (``owners``: the
    text of each, ``group_starts``: where each key's run of holders starts, one more at
    the end): a code ``later * texts + earlier`` for each two texts holding a key that 2
    to ``max_holders`` texts hold (a pair once a key; a text holds a key once), and each
    text's count of keys more texts hold. O(keys + pairs)."""
    boilerplate = np.zeros(texts, dtype=np.int64)
    total = 0
    for group in range(group_starts.shape[0] - 1):
        size = group_starts[group + 1] - group_starts[group]
        if 2 <= size <= max_holders:
            total += size * (size - 1) // 2
    codes = np.empty(total, dtype=np.int64)
    at = 0
    for group in range(group_starts.shape[0] - 1):
        low, high = group_starts[group], group_starts[group + 1]
        size = high - low
        if size > max_holders:
            for i in range(low, high):
                boilerplate[owners[i]] += 1
            continue
        for i in range(low, high):
            for j in range(low, high):
                if owners[j] < owners[i]:
                    codes[at] = owners[i] * texts + owners[j]
                    at += 1
    return codes, boilerplate


# A candidate is verified for a coverage ``bar`` only where the fingerprints it shares
# with the query could make it: shared + boilerplate + COVER_EXTRA at least slack x bar
# x the fewer fingerprints of the two texts, the slack COVER_SLACK + COVER_SLACK_PER_BAR
# x bar. A passage covering a share of a text holds about that share of its
# fingerprints (winnowing picks the same ones inside a shared run), less a few at each
# run's ends and where its tokens are denser than the text's; a larger share loses
# relatively less. On Reuters (3,000 searches of 20,000 stories, and of 20,000 joinings
# of 2-5 of them, 293,266 candidate pairs) a slack of 0.7 at bar 0.5 and of 0.8 at 0.8
# still missed no pair covered that much, where this one is 0.575 and 0.65; at 0.2 and
# 0.3 it misses what a fixed 0.5 missed (6 of 20,000 pairs at 0.3). It verifies 15-47%
# fewer candidates at 0.5 and 42-45% fewer at 0.8 than the fixed slack 0.5 did.
COVER_SLACK = 0.45
COVER_SLACK_PER_BAR = 0.25
COVER_EXTRA = 2


@njit(cache=True, nogil=True)
def covers(shared: int, boilerplate: int, query_keys: int, stored_keys: int, bar: float) -> bool:
    """Whether a candidate sharing ``shared`` fingerprints (``stored_keys`` its own) can
    share passages covering ``bar`` of the query (``query_keys``, ``boilerplate`` of them
    too common to be counted) or of itself: the rule of ``may_cover``. O(1)."""
    fewer = min(query_keys, stored_keys)
    slack = COVER_SLACK + COVER_SLACK_PER_BAR * bar
    return shared + boilerplate + COVER_EXTRA >= slack * bar * fewer


@njit(cache=True, nogil=True)
def may_cover_many(
    shared: np.ndarray,
    boilerplate: np.ndarray,
    query_keys: np.ndarray,
    stored_keys: np.ndarray,
    bar: float,
) -> np.ndarray:
    """``covers`` of each candidate (arrays of one length). O(candidates)."""
    out = np.empty(shared.shape[0], dtype=np.bool_)
    for i in range(shared.shape[0]):
        out[i] = covers(shared[i], boilerplate[i], query_keys[i], stored_keys[i], bar)
    return out


@njit(cache=True, nogil=True)
def counted_candidates(
    codes: np.ndarray,
    key_bounds: np.ndarray,
    capped: np.ndarray,
    key_counts: np.ndarray,
    bar: float,
    near_texts: np.ndarray,
    near_rows: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidates of several texts from the index's hits, ``codes`` (text << 32 |
    row: one a fingerprint a row holds, sorted; text i's fingerprints are ``[key_bounds[i],
    key_bounds[i + 1])`` of the lookup's): each (text, row) once with its count of
    hits, only those that may cover ``bar`` (``covers``; all with ``bar`` 0) or are
    among the pairs (``near_texts[j]``, ``near_rows[j]``): its near-duplicates; a row's
    count of fingerprints is ``key_counts[row, 0]`` (the index's per-row values), a
    fingerprint ``capped`` is boilerplate (counted for no row). Returns (rows, shared,
    bounds, boilerplate): text i's candidates at ``[bounds[i], bounds[i + 1])``, most
    shared first, ties by row; each text's count of boilerplate fingerprints. O(h) for
    h hits, and each text's candidates sorted."""
    texts = key_bounds.shape[0] - 1
    boilerplate = np.zeros(texts, dtype=np.int64)
    query_keys = np.empty(texts, dtype=np.int64)
    for text in range(texts):
        query_keys[text] = key_bounds[text + 1] - key_bounds[text]
        for at in range(key_bounds[text], key_bounds[text + 1]):
            boilerplate[text] += capped[at]
    near = np.sort((near_texts << 32) | near_rows)  # sorted as ``codes`` are
    found = np.empty(codes.shape[0], dtype=np.int64)
    shared = np.empty(codes.shape[0], dtype=np.int64)
    owner_of = np.empty(codes.shape[0], dtype=np.int64)
    kept = 0
    at = 0
    cursor = 0  # into ``near``
    while at < codes.shape[0]:
        code = codes[at]
        end = at + 1
        while end < codes.shape[0] and codes[end] == code:
            end += 1
        text, row = code >> 32, code & 0xFFFFFFFF
        count = end - at
        keep = bar <= 0.0 or covers(
            count, boilerplate[text], query_keys[text], int(key_counts[row, 0]), bar
        )
        if not keep:
            while cursor < near.shape[0] and near[cursor] < code:
                cursor += 1
            keep = cursor < near.shape[0] and near[cursor] == code
        if keep:
            found[kept], shared[kept], owner_of[kept] = row, count, text
            kept += 1
        at = end
    bounds = np.zeros(texts + 1, dtype=np.int64)
    for i in range(kept):
        bounds[owner_of[i] + 1] += 1
    for text in range(texts):
        bounds[text + 1] += bounds[text]
    out_rows = np.empty(kept, dtype=np.int64)
    out_shared = np.empty(kept, dtype=np.int64)
    for text in range(texts):  # each text's run: most shared first, then by row
        low, high = bounds[text], bounds[text + 1]
        order = np.argsort(((1 << 31) - shared[low:high]) << 32 | found[low:high])
        for i in range(high - low):
            out_rows[low + i] = found[low + order[i]]
            out_shared[low + i] = shared[low + order[i]]
    return out_rows, out_shared, bounds, boilerplate


@njit(cache=True, nogil=True)
def host_hits(
    positions: np.ndarray,
    rows: np.ndarray,
    entry_hosts: np.ndarray,
    key_bounds: np.ndarray,
    hosts: np.ndarray,
    excludes: np.ndarray,
    repeats: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(keep, pages) of an index's hits for several texts (app/core/hosts.py's rule): hit
    i is fingerprint ``positions[i]`` (text t's at ``[key_bounds[t], key_bounds[t + 1])``)
    held by row ``rows[i]`` of host ``entry_hosts[i]``; ``pages[p]`` the pages of text t's
    host (``hosts[t]``; 0: none) holding fingerprint p, its own row (``excludes[t]``) left
    out; ``keep[i]`` False for a hit of the text's own row, and for one of a page of its
    host holding a fingerprint ``repeats`` of them hold (its host's chrome). O(hits log
    texts)."""
    texts = key_bounds.shape[0] - 1
    pages = np.zeros(key_bounds[texts], dtype=np.int64)
    count = positions.shape[0]
    keep = np.ones(count, dtype=np.bool_)
    same = np.zeros(count, dtype=np.bool_)
    for i in range(count):
        position = positions[i]
        text = 0 if texts == 1 else first_above(key_bounds, 0, texts + 1, position) - 1
        if rows[i] == excludes[text]:
            keep[i] = False
        elif hosts[text] != 0 and entry_hosts[i] == hosts[text]:
            same[i] = True
            pages[position] += 1
    for i in range(count):
        if same[i] and pages[positions[i]] >= repeats:
            keep[i] = False
    return keep, pages
