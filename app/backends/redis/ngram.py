"""The n-gram index of short texts for a collection over Redis (app/backends/redis/store/grams.py).

The same answers as the embedded NgramIndex: every stored short text whose q-gram set
has Jaccard >= t with a query's (t the collection's threshold, or a search's higher
min_similarity), each with that exact Jaccard, compared as ``len(a & b) / len(a | b) >=
t`` is. Only the candidates differ (a hash order here, a learned one in process), and
every candidate is verified.

Per query, in the search's round trips: its prefix tokens probed in the first (a
``ZRANGE`` each, sizes from t m to m / t), the candidates' records (their normalised
short texts) with the other methods' rows in the second, or in a third for candidates
no other method found.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.backends.redis.store.grams import GramTable, ordered
from app.backends.redis.store.wire import Command
from app.collection_config import NgramConfig

# The bounds the kernels use (loosened by a hair against rounding, never tightened), called
# from Python: one rule for the embedded index, Redis and the batch job.
from app.core._gram_kernels import at_least, at_most, prefix_length
from app.core.ngram import DEFAULT_PREFIX_MATCHES, gram_sets
from app.core.template import differing_numbers
from app.core.types import Rows

Codes = npt.NDArray[np.uint64]
# Tokens a stored set and a query must share in their prefixes (k): each costs one entry
# a stored text, and cuts the candidates several-fold (NgramIndex's default, measured in
# bench/ngram.py).
PREFIX_MATCHES = DEFAULT_PREFIX_MATCHES


@dataclass(frozen=True)
class Probes:
    """A batch's probes: the commands, and per command the query position and its size."""

    commands: list[Command]
    positions: list[int]
    sizes: dict[int, int]  # position -> the query's set size
    sets: dict[int, Codes]  # position -> the query's set
    texts: dict[int, str]  # position -> the query's short text (the template rule)


class RedisNgram:
    """Short texts (at most ngram.max_chars normalised characters) of one collection."""

    def __init__(self, config: NgramConfig, table: GramTable) -> None:
        self.threshold = config.threshold
        self.size = config.size
        self.cjk_size = config.cjk_size
        self.same_numbers = config.same_numbers
        self.table = table

    def sets(self, texts: list[str]) -> list[Codes]:
        return gram_sets(texts, self.size, self.cjk_size)

    def _prefix(self, codes: Codes) -> Codes:
        return ordered(codes)[: prefix_length(len(codes), self.threshold, PREFIX_MATCHES)]

    def writes(self, command: str, texts: list[str], rows: Rows) -> list[Command]:
        """``ZADD`` (or ``ZREM``) of the prefix entries of stored short texts."""
        keys: list[Codes] = []
        sizes: list[Rows] = []
        for codes in self.sets(texts):
            prefix = self._prefix(codes)
            keys.append(prefix)
            sizes.append(np.full(len(prefix), len(codes), dtype=np.int64))
        counts = [len(k) for k in keys]
        if not sum(counts):
            return []
        return self.table.writes(
            command,
            np.concatenate(keys),
            np.concatenate(sizes),
            np.repeat(np.asarray(rows, dtype=np.int64), counts),
        )

    def probes(self, shorts: list[str | None] | None) -> Probes:
        """The lookups of each short query's prefix tokens."""
        probes = Probes([], [], {}, {}, {})
        if shorts is None:
            return probes
        positions = [p for p, text in enumerate(shorts) if text is not None]
        texts = [shorts[p] or "" for p in positions]
        for position, codes in zip(positions, self.sets(texts), strict=True):
            m = len(codes)
            if not m:
                continue  # an empty text matches nothing
            probes.sizes[position] = m
            probes.sets[position] = codes
            probes.texts[position] = shorts[position] or ""
            commands = self.table.lookups(
                self._prefix(codes), at_least(self.threshold * m), at_most(m / self.threshold)
            )
            probes.commands.extend(commands)
            probes.positions.extend([position] * len(commands))
        return probes

    def candidates(self, probes: Probes, replies: list[list[bytes]]) -> tuple[Rows, Rows]:
        """(positions, rows) meeting in min(k, fewest shared tokens) probed tokens."""
        met: Counter[tuple[int, int]] = Counter()
        size_of: dict[int, int] = {}
        for position, members in zip(probes.positions, replies, strict=True):
            sizes, rows = GramTable.decode(members)
            for size, row in zip(sizes.tolist(), rows.tolist(), strict=True):
                met[(position, row)] += 1
                size_of[row] = size
        positions: list[int] = []
        found: list[int] = []
        for (position, row), count in met.items():
            shared = at_least(self.threshold * max(probes.sizes[position], size_of[row]))
            if count >= min(PREFIX_MATCHES, shared):
                positions.append(position)
                found.append(row)
        return np.array(positions, dtype=np.int64), np.array(found, dtype=np.int64)

    def verified(
        self,
        probes: Probes,
        positions: Rows,
        rows: Rows,
        texts: list[str | None],
        threshold: float,
        same_numbers: bool = True,
    ) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
        """The candidates (``texts[i]`` the stored short text of ``rows[i]``, None for a
        row that has none) whose exact Jaccard with the query is at least ``threshold``,
        and that Jaccard; with same_numbers, not those that are another report of the
        query's template (``same_numbers`` False: the rule set aside, for explain)."""
        held = [i for i, text in enumerate(texts) if text is not None]
        stored = self.sets([texts[i] or "" for i in held])
        keep: list[int] = []
        similarity: list[float] = []
        refusing = self.same_numbers and same_numbers
        for i, codes in zip(held, stored, strict=True):
            query = probes.sets[int(positions[i])]
            inter = len(np.intersect1d(query, codes, assume_unique=True))
            union = len(query) + len(codes) - inter
            jaccard = inter / union if union else 0.0
            if jaccard < threshold:
                continue
            asked = probes.texts[int(positions[i])]
            if refusing and differing_numbers(asked, texts[i] or "") is not None:
                continue  # another report of the query's template (app/core/template.py)
            keep.append(i)
            similarity.append(jaccard)
        at = np.array(keep, dtype=np.int64)
        return positions[at], rows[at], np.array(similarity, dtype=np.float64)
