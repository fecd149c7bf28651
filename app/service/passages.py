"""Shared passages in answers, the same on every backend: a backend finds each stored
document's passages with a query (app/core/passages.py); this turns them into matches.

- A document that is also a near-duplicate keeps its match, with "passage" added to its
  methods, its passages and coverages.
- A document found by its passages alone is a match of its own: methods ["passage"],
  similarity 1 / (1 / q + 1 / m - 1) for coverages q (of the query) and m (of it), the
  token Jaccard of two texts whose shared part is the passages (a story inside a roundup
  of six: q = 1/6, m = 1, similarity 1/6; texts nearly the same: near 1); its Hamming
  distance is its SimHash's to the query's. ``min_coverage`` drops those whose larger
  coverage is below it.
- Inserts: ``contains`` are the earlier documents at least CONTAINED inside the new one
  (their coverage), ``contained_in`` those that hold at least CONTAINED of it. Clusters
  stay for near-duplicates: a containment is a relation, never a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt

from app.collection_config import PassagesConfig
from app.core import _candidate_kernels as candidate_kernels
from app.core import _passage_kernels as kernels
from app.core.hosts import NO_HOST, NO_PAGES, HostPages, without_chrome
from app.core.methods import BIT_OF_METHOD, METHODS_OF_BITS, PASSAGE
from app.core.passages import (
    Passage,
    TokenRuns,
    Tokens,
    coverage,
    kgrams,
    may_cover,
    shared_passages_many,
    text_hash,
    tokenize,
    tokens_and_fingerprints,
)
from app.core.types import Rows
from app.service.types import Match, PassageMatch, Query, SharedPassage

# The age of a batch's own documents: newer than every stored one.
BATCH_AGE = 1 << 62
# A document this much inside another is contained in it (the rest: its headline, a
# dateline, a sign-off that the other text words differently).
CONTAINED = 0.8


@dataclass(frozen=True, slots=True)
class Found:
    """One stored document's passages with a query: its id, the passages, the lengths
    (code points) of the query and of its text, its SimHash distance to the query, its
    age (what orders the older first on a tie: an embedded row, a Redis sequence), its
    host's key (app/core/hosts.py)."""

    document_id: str
    passages: list[Passage]
    query_length: int
    match_length: int
    distance: int
    age: int
    host: int = NO_HOST

    def coverages(self) -> tuple[float, float]:
        """(query_coverage, match_coverage), as answered. O(passages log passages)."""
        return (
            round(coverage(self.passages, self.query_length), 6),
            round(coverage(self.passages, self.match_length, of_match=True), 6),
        )

    def match(
        self, near: Match | None = None, coverages: tuple[float, float] | None = None
    ) -> PassageMatch:
        """Its answer: ``near``'s with the passages added, or one of its own
        (``coverages``: its ``coverages()``, where the caller has them already)."""
        query_coverage, match_coverage = coverages or self.coverages()
        spans = tuple(
            SharedPassage(p.start, p.end, p.match_start, p.match_end) for p in self.passages
        )
        if near is not None:
            bits = sum(BIT_OF_METHOD[method] for method in near.methods)
            return PassageMatch(
                near.id,
                near.similarity,
                near.hamming_distance,
                METHODS_OF_BITS[bits | PASSAGE],
                spans,
                query_coverage,
                match_coverage,
            )
        return PassageMatch(
            self.document_id,
            coverage_similarity(query_coverage, match_coverage),
            self.distance,
            METHODS_OF_BITS[PASSAGE],
            spans,
            query_coverage,
            match_coverage,
        )


class PassageQuery:
    """A text whose passages are looked for: its fingerprints and SimHash, the row it
    must not find (itself, or the document it replaces; -1: none), its host's key
    (app/core/hosts.py; NO_HOST: none known) and what the stored pages of that host hold
    of its fingerprints (``host_pages``: set by a backend's lookup), and its tokens, made
    when first asked for (only a text with candidates needs them)."""

    __slots__ = (
        "_text_hash",
        "_tokens",
        "exclude",
        "host",
        "host_pages",
        "keys",
        "simhash",
        "text",
    )

    def __init__(
        self,
        text: str,
        keys: npt.NDArray[np.uint64],
        simhash: int,
        exclude: int = -1,
        host: int = NO_HOST,
    ) -> None:
        self.text = text
        self.keys = keys
        self.simhash = simhash
        self.exclude = exclude
        self.host = host
        self.host_pages: HostPages = NO_PAGES
        self._tokens: Tokens | None = None
        self._text_hash = 0

    @property
    def tokens(self) -> Tokens:
        """The text's tokens, made once. O(text) the first time."""
        if self._tokens is None:
            self._tokens = tokenize(self.text)
        return self._tokens

    @property
    def text_hash(self) -> int:
        """The text's ``text_hash``, made once. O(text) the first time."""
        if not self._text_hash:
            self._text_hash = text_hash(self.text)
        return self._text_hash

    def without_chrome(
        self, found: list[Found], k: int, chrome: npt.NDArray[np.uint64] | None = None
    ) -> list[Found]:
        """``found`` (in order) less its host's ``chrome`` passages (default: the stored
        pages', ``host_pages.chrome()``; ``hosts.without_chrome``) where a document is a
        page of this one's host; a document left with no passage is not found.
        O(passage tokens)."""
        if self.host == NO_HOST:  # no page of its host to leave chrome out for
            return found
        if chrome is None:
            chrome = self.host_pages.chrome()
        same_host = [self.host != NO_HOST and one.host == self.host for one in found]
        if not len(chrome) or not any(same_host):
            return found
        tokens = self.tokens
        grams = kgrams(tokens, k)
        kept: list[Found] = []
        for one, same in zip(found, same_host, strict=True):
            if same:
                passages = without_chrome(one.passages, tokens.starts, grams, self.keys, chrome, k)
                if not passages:
                    continue
                if len(passages) < len(one.passages):
                    one = replace(one, passages=passages)
            kept.append(one)
        return kept

    @staticmethod
    def of(
        text: str, simhash: int, config: PassagesConfig, exclude: int = -1, host: int = NO_HOST
    ) -> PassageQuery:
        """A text's query, its tokens made once for its fingerprints and verification.
        O(text)."""
        tokens, keys = tokens_and_fingerprints(text, config.k, config.window)
        asked = PassageQuery(text, keys, simhash, exclude, host)
        asked._tokens = tokens
        return asked

    @staticmethod
    def batch(
        texts: Sequence[str],
        keys: Sequence[npt.NDArray[np.uint64]],
        simhashes: Sequence[int],
        excludes: Sequence[int],
        hosts: Sequence[int] | None = None,
    ) -> list[PassageQuery]:
        """An insert batch's queries, of texts whose fingerprints (``keys``, each text's)
        the insert made as it prepared. O(texts)."""
        each_host = [NO_HOST] * len(texts) if hosts is None else hosts
        return [
            PassageQuery(text, text_keys, simhash, exclude, host)
            for text, text_keys, simhash, exclude, host in zip(
                texts, keys, simhashes, excludes, each_host, strict=True
            )
        ]


def coverage_similarity(query_coverage: float, match_coverage: float) -> float:
    """The token Jaccard of two texts whose shared part covers these shares of each."""
    if query_coverage <= 0.0 or match_coverage <= 0.0:
        return 0.0
    return round(1.0 / (1.0 / query_coverage + 1.0 / match_coverage - 1.0), 6)


def annotated(matches: list[Match], found: list[Found]) -> list[Match]:
    """Near-duplicate matches, those that share passages with the query too with them
    (an insert's matches: its passages alone make relations, not matches)."""
    by_id = {f.document_id: f for f in found}
    return [m if m.id not in by_id else by_id[m.id].match(m) for m in matches]


def with_passages(matches: list[Match], found: list[Found], query: Query) -> list[Match]:
    """A query's near-duplicate matches (best first) and its passages' finds, as one
    answer, best first, at most ``query.limit``. O((matches + found) log)."""
    if not found:
        return matches
    answer = annotated(matches, found)
    near = {m.id for m in matches}
    alone_found = [f for f in found if f.document_id not in near]
    alone_found.sort(key=lambda f: f.age)  # older first where the rest ties
    for alone in alone_found:  # the coverages first: most finds fall below min_coverage
        coverages = alone.coverages()
        if max(coverages) < query.min_coverage:
            continue
        similarity = coverage_similarity(*coverages)
        if query.min_similarity is not None and similarity < query.min_similarity:
            continue
        answer.append(alone.match(coverages=coverages))
    answer.sort(key=lambda m: (-m.similarity, m.hamming_distance))  # stable: ties keep order
    return answer[: query.limit]


def relations(
    found: list[Found], matches: list[Match]
) -> tuple[list[PassageMatch], list[PassageMatch]]:
    """(contains, contained_in) of a new document: the earlier documents it holds, and
    those that hold it, at least CONTAINED, best covered first. Its near-duplicate
    ``matches`` are not repeated there: they answer with their passages already."""
    if not found:  # most new documents
        return [], []
    near = {m.id for m in matches}
    found = [f for f in found if f.document_id not in near]
    if not found:
        return [], []
    alone = [f.match() for f in sorted(found, key=lambda f: f.age)]  # older first on ties
    contains = [m for m in alone if m.match_coverage >= CONTAINED]
    contained_in = [m for m in alone if m.query_coverage >= CONTAINED]
    contains.sort(key=lambda m: -m.match_coverage)
    contained_in.sort(key=lambda m: -m.query_coverage)
    return contains, contained_in


_NO_PASSES = np.zeros(0, dtype=np.bool_)


class BatchPassages:
    """The documents of one insert batch, for the relations between them (a batch is
    matched as if its documents came one by one: each with the earlier ones stored).
    Every text is tokenised and fingerprinted once; the pairs sharing a fingerprint are
    found by one sort of all the batch's fingerprints (a fingerprint more than
    ``max_rows`` of them hold seeds nothing, as in the index). O(F log F) for F
    fingerprints, then a dict lookup a document."""

    def __init__(
        self,
        config: PassagesConfig,
        candidates: int,
        queries: Sequence[PassageQuery],
        query: Query,
        window: int | None,
    ) -> None:
        self._config = config
        self._candidates = candidates
        self._since, self._until, self._window = query.since, query.until, window
        self.queries = list(queries)
        keys = [q.keys for q in self.queries]
        self._shared = shared = shared_counts(keys, config.max_rows)
        # Whether each pair may be a containment (may_cover at CONTAINED), all at once.
        self._passes = _NO_PASSES
        if len(shared.counts):  # a single insert has no pair
            sizes = np.array([len(k) for k in keys], dtype=np.int64)
            self._passes = may_cover(
                shared.counts,
                shared.boilerplate[shared.later],
                sizes[shared.later],
                sizes[shared.earlier],
                CONTAINED,
            )
        self._stored: dict[int, tuple[str, int, int]] = {}  # position -> id, simhash, time
        # Host -> its pages stored so far in the batch, by fingerprint (the host rule's
        # earlier pages, app/core/hosts.py).
        self._host_keys: dict[int, Counter[int]] = {}

    def _admits(self, earlier: int, stamp: int) -> bool:
        """An earlier document's time against the query's since / until and the match
        window of a later one's (``stamp``), as the indexes' matches are kept."""
        if self._since is not None and earlier < self._since:
            return False
        if self._until is not None and earlier > self._until:
            return False
        return self._window is None or abs(earlier - stamp) <= self._window

    def find(
        self,
        position: int,
        simhash: int,
        stamp: int,
        near: Collection[str] = (),
        from_store: Sequence[Found] = (),
    ) -> list[Found]:
        """``from_store`` (what the document at ``position`` shares with stored ones) and
        the earlier stored documents of the batch sharing passages with it that its time
        (``stamp``) admits and that may be contained in it or hold it (``may_cover`` at
        CONTAINED), or are among its near-duplicates (ids ``near``: their passages
        annotate their matches); its host's chrome left out between its host's pages,
        counted over the stored pages and the batch's earlier ones, as if the batch came
        one by one."""
        if not (from_store or self._pairs_with_earlier(position)):  # most documents
            return []
        found = self._find(position, simhash, stamp, near) + list(from_store)
        asked = self.queries[position]
        if asked.host == NO_HOST or not found:
            return found
        earlier = self._host_keys.get(asked.host)
        counts = (
            [0] * len(asked.keys) if earlier is None else [earlier[k] for k in asked.keys.tolist()]
        )
        chrome = asked.host_pages.chrome(asked.keys, np.array(counts, dtype=np.int64))
        return asked.without_chrome(found, self._config.k, chrome)

    def _pairs_with_earlier(self, position: int) -> bool:
        """Whether the document at ``position`` shares a fingerprint with an earlier one of
        the batch. O(1)."""
        if not len(self._shared.later):  # no two documents of the batch share a fingerprint
            return False
        return self._shared.bounds[position] < self._shared.bounds[position + 1]

    def _find(self, position: int, simhash: int, stamp: int, near: Collection[str]) -> list[Found]:
        """``find``'s earlier documents of the batch, their passages as verified."""
        if not self._pairs_with_earlier(position):
            return []
        start, end = self._shared.bounds[position], self._shared.bounds[position + 1]
        passes = self._passes[start:end]
        if not (near or passes.any()):
            return []
        earlier, counts = self._shared.earlier[start:end], self._shared.counts[start:end]
        shared = dict(zip(earlier.tolist(), counts.tolist(), strict=True))
        held = [
            q
            for q, can in zip(shared, passes.tolist(), strict=True)
            if q in self._stored
            and self._admits(self._stored[q][2], stamp)
            and (can or self._stored[q][0] in near)
        ]
        if not held:
            return []
        asked = self.queries[position]
        held.sort(key=lambda q: (-shared[q], q))
        held = held[: self._candidates]
        found: list[Found] = []
        k, minimum = self._config.k, self._config.min_tokens
        stored_tokens = TokenRuns.of_tokens([self.queries[earlier].tokens for earlier in held])
        runs = shared_passages_many(asked.tokens, stored_tokens, k, minimum)
        for earlier, passages in zip(held, runs, strict=True):
            stored_query = self.queries[earlier]
            if passages:
                document_id, stored_simhash, _ = self._stored[earlier]
                distance = (simhash ^ stored_simhash).bit_count()
                text, stored = asked.text, stored_query.text
                age = BATCH_AGE + earlier
                found.append(
                    Found(
                        document_id,
                        passages,
                        len(text),
                        len(stored),
                        distance,
                        age,
                        stored_query.host,
                    )
                )
        return found

    def stored(self, position: int, document_id: str, simhash: int, stamp: int) -> None:
        """The document at ``position`` is stored: the later ones may relate to it."""
        self._stored[position] = (document_id, simhash, stamp)
        host = self.queries[position].host
        if host != NO_HOST:
            self._host_keys.setdefault(host, Counter()).update(self.queries[position].keys.tolist())


@dataclass(frozen=True)
class SharedCounts:
    """The pairs of texts sharing fingerprints, by later text: ``earlier[i]`` shares
    ``counts[i]`` with ``later[i]``, sorted by (later, earlier); ``boilerplate[t]``: text
    t's fingerprints that more than the cap of texts hold (counted for no pair)."""

    later: Rows
    earlier: Rows
    counts: Rows
    boilerplate: Rows

    @cached_property
    def bounds(self) -> list[int]:
        """Where each text's pairs start in ``later``, and the end."""
        texts = len(self.boilerplate)
        bounds: list[int] = np.searchsorted(self.later, np.arange(texts + 1)).tolist()
        return bounds


def shared_counts(keys: list[npt.NDArray[np.uint64]], max_holders: int) -> SharedCounts:
    """The pairs of the texts of ``keys`` (their fingerprints) that share some, and how
    many: one sort of all of them, one compiled pass; a fingerprint more than
    ``max_holders`` texts hold is boilerplate and counts for none. O(F + pairs) expected."""
    counts = np.array([len(k) for k in keys], dtype=np.int64)
    texts = len(keys)
    if texts < 2 or counts.sum() < 2:  # one text (a single insert) pairs with none
        empty = np.zeros(0, dtype=np.int64)
        return SharedCounts(empty, empty, empty, np.zeros(texts, dtype=np.int64))
    flat = np.concatenate(keys)
    owner = np.repeat(np.arange(texts, dtype=np.int64), counts)
    # Equal keys grouped by sorting them spread (a bijection: equal stay equal), by their
    # top bits in O(F); the holders of a key are ordered in the kernel.
    flat, order = kernels.spread_sorted(flat)
    flat, owner = flat[order], owner[order]
    starts = np.flatnonzero(np.concatenate(([True], flat[1:] != flat[:-1])))
    codes, boilerplate = candidate_kernels.holder_pairs(
        owner, np.append(starts, len(flat)), max_holders, texts
    )
    pairs, shared = np.unique(codes, return_counts=True)
    return SharedCounts(pairs // texts, pairs % texts, shared.astype(np.int64), boilerplate)
