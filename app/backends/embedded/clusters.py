"""The members of each cluster of an embedded collection."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.backends.embedded.states import GONE, LIVE

# A cluster's members: [head, count, end, row, row, ...] with room to grow; rows[head:end]
# hold every member not GONE (and some GONE ones, dropped lazily), oldest first.
_HEAD, _COUNT, _END, _FIRST = 0, 1, 2, 3


class ClusterMembers:
    """The rows that joined each cluster, oldest first (the row naming a cluster is not
    listed: most documents are alone in their cluster and cost nothing here). A row that
    leaves is dropped lazily (when it reaches the front, or by a compaction once the
    departed outnumber the rest), so that evicting a large cluster oldest first costs
    O(1) per row.

    A cluster's rows are one int64 array in a dict of ints: the garbage collector tracks
    neither, where an object and a list per cluster made every full collection visit them
    in memory the stream had scattered (most of a collection's CPU, holding the GIL, every
    few seconds under inserts; docs/journal.md, "Issue 13")."""

    __slots__ = ("_clusters",)

    def __init__(self) -> None:
        self._clusters: dict[int, npt.NDArray[np.int64]] = {}

    def __contains__(self, cluster: int) -> bool:
        return cluster in self._clusters

    def __len__(self) -> int:
        return len(self._clusters)

    def add(self, cluster: int, row: int) -> None:
        members = self._clusters.get(cluster)
        if members is None:
            members = self._clusters[cluster] = np.zeros(_FIRST + 1, dtype=np.int64)
            members[_HEAD] = members[_END] = _FIRST
        end = int(members[_END])
        if end == len(members):
            grown = np.zeros(2 * end, dtype=np.int64)
            grown[:end] = members
            members = self._clusters[cluster] = grown
        members[end] = row
        members[_END] = end + 1
        members[_COUNT] += 1

    def leave(self, cluster: int, state: npt.NDArray[np.uint8]) -> bool:
        """One row of the cluster left (its state is GONE already). True when it was the
        last: the cluster has no members any more."""
        members = self._clusters[cluster]
        count = int(members[_COUNT]) - 1
        if count == 0:
            del self._clusters[cluster]
            return True
        members[_COUNT] = count
        head, end = int(members[_HEAD]), int(members[_END])
        if end - head > 2 * count + 8:
            rows = members[head:end]
            kept = rows[state[rows] != GONE]
            members[_FIRST : _FIRST + len(kept)] = kept
            members[_HEAD], members[_END] = _FIRST, _FIRST + len(kept)
        return False

    def first_live(self, cluster: int, state: npt.NDArray[np.uint8], block: int = 64) -> int | None:
        """The oldest LIVE row of the cluster (HIDDEN ones are skipped, GONE ones at the
        front dropped), looked for a block of rows at a time."""
        members = self._clusters.get(cluster)
        if members is None:
            return None
        at, end = int(members[_HEAD]), int(members[_END])
        front = True  # every row before ``at`` is GONE
        while at < end:
            rows = members[at : min(end, at + block)]
            states = state[rows]
            if front:
                held = np.flatnonzero(states != GONE)
                front = not len(held)
                members[_HEAD] = at + (int(held[0]) if len(held) else len(rows))
            live = np.flatnonzero(states == LIVE)
            if len(live):
                return int(rows[live[0]])
            at += len(rows)
        return None

    def rows(self, cluster: int) -> npt.NDArray[np.int64]:
        """The rows listed (GONE ones not dropped yet included), oldest first."""
        members = self._clusters[cluster]
        return members[int(members[_HEAD]) : int(members[_END])]

    def count(self, cluster: int) -> int:
        """Members not GONE."""
        return int(self._clusters[cluster][_COUNT])

    def clusters(self) -> list[int]:
        return list(self._clusters)
