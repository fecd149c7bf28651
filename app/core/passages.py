"""Shared passages: one text inside another, found by winnowed token k-grams and verified
token by token, with code point offsets into both texts as they were sent.

- ``tokenize``: a text's tokens (runs of word characters, or one character of a script
  written without spaces), each with its code point span in the original text and the
  hash of its case-folded characters. Offsets are never byte offsets.
- ``fingerprints``: the winnowed k-gram hashes of a text (Schleimer, Wilkerson, Aiken,
  SIGMOD 2003): any run of at least ``window + k - 1`` equal tokens in two texts shares
  one of them. Expected density 2 / (window + 1) a token.
- ``PassageIndex``: rows by fingerprint, on a TableIndex (sorted arrays and an insert
  buffer), with a document-frequency cap: a fingerprint held by more than ``max_rows``
  rows (boilerplate) seeds nothing.
- ``shared_passages``: every maximal run of equal tokens of two texts that shares a
  k-gram, at least ``minimum`` tokens long, as token ranges and code point offsets.
"""

from __future__ import annotations

import itertools
import threading
import unicodedata
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import xxhash

from app.core import _candidate_kernels as candidate_kernels
from app.core import _passage_kernels as kernels
from app.core.fingerprint import UNICODE_SIZE, char_classes, code_points_of
from app.core.hosts import NO_HOST, NO_PAGES, HostPages, host_hits
from app.core.row_array import RowArray
from app.core.run_builder import RunBuilder
from app.core.sorted_table import top_halves
from app.core.table_index import TableIndex
from app.core.types import Rows

DEFAULT_K = 5  # tokens a k-gram
DEFAULT_WINDOW = 8  # k-grams a winnowing window: every shared run of 12 tokens seeds
# Tokens of the shortest passage reported: Clough-Stevenson's non-plagiarised answers share
# at most 8 consecutive words with their source, its copied ones 12 or more; on Reuters
# (bench/passages.py) 10 keeps 98.5% of lightly revised passages and no unrelated answer,
# 12 keeps 95%, 8 lets 0.5% of unrelated answers through.
DEFAULT_MINIMUM = 10
DEFAULT_MAX_ROWS = 64  # rows a fingerprint may seed before it counts as boilerplate
# Its largest setting: the row counts it is compared with are 32-bit integers (a larger
# one made a collection that Redis could not create: a 500).
MAX_MAX_ROWS = (1 << 31) - 1
MAX_K = 16
MAX_WINDOW = 64
MAX_MINIMUM = 1000
# Occurrences of one k-gram in each text used as seeds (its first): a k-gram repeated
# more often (a list, a chorus) still seeds the runs through its first occurrences. The
# query's too: a text repeating one sentence 20,000 times against a copy seeded every
# shift of the sentence, 2.9M seeds, 20,000 overlapping passages (2.6 MB of answer) and
# 2-5 s a request; now 31 (docs/journal.md, "Boilerplate near-duplicates").
SEEDS_PER_KGRAM = 16


@dataclass(frozen=True, slots=True)
class Tokens:
    """A text's tokens: ``hashes[i]`` of the i-th token, its code points
    ``[starts[i], ends[i])`` in the text as sent."""

    hashes: npt.NDArray[np.uint64]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.hashes)

    def kernel_arrays(
        self,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(hashes, starts, ends): the tokens as the verification kernels take them."""
        return self.hashes, self.starts, self.ends


@dataclass(frozen=True, slots=True)
class Passage:
    """A run of equal tokens: code points ``[start, end)`` of the query, ``[match_start,
    match_end)`` of the stored text; ``tokens`` long."""

    start: int
    end: int
    match_start: int
    match_end: int
    tokens: int


class _Folding:
    """Each code point's case fold, as one code point (NFKC of its casefold when that is
    a single character; else itself). ASCII at once; others as texts bring them, each
    computed once per process."""

    def __init__(self) -> None:
        self.table = np.arange(UNICODE_SIZE, dtype=np.uint32)
        self.table[ord("A") : ord("Z") + 1] += 32
        self._known = np.zeros(UNICODE_SIZE, dtype=np.bool_)
        self._known[:128] = True
        self._lock = threading.Lock()

    def learn(self, code_points: npt.NDArray[np.uint32]) -> None:
        """Fold the code points not seen before. O(length) numpy, Python per new one."""
        unseen = code_points[~self._known[code_points]]
        if not len(unseen):
            return
        with self._lock:
            for code_point in np.unique(unseen).tolist():
                folded = unicodedata.normalize("NFKC", chr(code_point).casefold())
                if len(folded) == 1:
                    self.table[code_point] = ord(folded)
                self._known[code_point] = True


@lru_cache(maxsize=1)
def _folding() -> _Folding:
    return _Folding()


def _code_points(text: str) -> npt.NDArray[np.uint32]:
    """A text's code points (one per ``len``: a lone surrogate too), their folds known."""
    code_points = code_points_of(text)
    if not text.isascii():  # ASCII's folds are known from the start
        _folding().learn(code_points)
    return code_points


def tokenize(text: str) -> Tokens:
    """The tokens of a text as sent. O(length)."""
    return Tokens(*kernels.text_tokens(_code_points(text), char_classes(), _folding().table))


def tokens_and_fingerprints(
    text: str, k: int, window: int
) -> tuple[Tokens, npt.NDArray[np.uint64]]:
    """``tokenize(text)`` and ``fingerprints`` of those tokens, in one compiled call (a
    search's query). O(length (k + window))."""
    hashes, starts, ends, keys = kernels.text_query(
        _code_points(text), char_classes(), _folding().table, k, window
    )
    return Tokens(hashes, starts, ends), keys


@dataclass(frozen=True, slots=True)
class TokenRuns:
    """Several texts' tokens in one run of arrays: text i's are ``[bounds[i], bounds[i +
    1])`` of ``hashes``, ``starts`` and ``ends`` (code points in that text)."""

    hashes: npt.NDArray[np.uint64]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @staticmethod
    def of_tokens(tokens: Sequence[Tokens]) -> TokenRuns:
        """Texts' tokens made already, put end to end. O(total tokens)."""
        bounds = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tokens], out=bounds[1:])
        if not tokens:
            return TokenRuns(_NO_HASHES, _NO_OFFSETS, _NO_OFFSETS, bounds)
        return TokenRuns(
            np.concatenate([t.hashes for t in tokens]),
            np.concatenate([t.starts for t in tokens]),
            np.concatenate([t.ends for t in tokens]),
            bounds,
        )


_NO_HASHES = np.zeros(0, dtype=np.uint64)
_NO_OFFSETS = np.zeros(0, dtype=np.int64)


def kgrams(tokens: Tokens, k: int) -> npt.NDArray[np.uint64]:
    """The hash of each k consecutive tokens, in order (none below k tokens)."""
    out = np.empty(max(0, len(tokens) - k + 1), dtype=np.uint64)
    count = kernels.kgram_hashes(tokens.hashes, k, out)
    return out[:count]


def fingerprints(tokens: Tokens, k: int, window: int) -> npt.NDArray[np.uint64]:
    """The text's winnowed k-gram hashes, each once, sorted."""
    out = np.empty(max(0, len(tokens) - k + 1), dtype=np.uint64)
    count = kernels.fingerprint_keys(tokens.hashes, k, window, out)
    return out[:count].copy()


def _bounds(texts: Sequence[Sized]) -> npt.NDArray[np.int64]:
    """Where each text (or array of keys) starts in their concatenation, and the total:
    one longer than ``texts``."""
    # Summed in Python: numpy's cumsum costs more than the sum of a search's one or few
    # texts (python -m bench.passages --service).
    return np.array(list(itertools.accumulate(map(len, texts), initial=0)), dtype=np.int64)


def fingerprints_many(texts: Sequence[str], k: int, window: int) -> list[npt.NDArray[np.uint64]]:
    """``fingerprints(tokenize(text), k, window)`` of each text, in one compiled call
    (an insert batch: no token offsets made, no call per text). O(total length)."""
    code_points = _code_points("".join(texts))
    bounds = _bounds(texts)
    keys = np.empty(len(code_points), dtype=np.uint64)
    key_bounds = np.empty(len(texts) + 1, dtype=np.int64)
    kernels.fingerprint_texts(
        code_points, bounds, char_classes(), _folding().table, k, window, keys, key_bounds
    )
    keys = keys[: key_bounds[-1]].copy()  # the texts' keys share one exact-size array
    return [keys[start:end] for start, end in itertools.pairwise(key_bounds.tolist())]


def shared_passages(
    query: Tokens, stored: Tokens, k: int = DEFAULT_K, minimum: int = DEFAULT_MINIMUM
) -> list[Passage]:
    """Every maximal run of equal tokens of the two texts that shares a k-gram and is at
    least ``minimum`` tokens long (``minimum`` >= k), in query order. Each k-gram hash
    found in both is verified token by token: a hash collision makes no passage.
    O((n + m) log m + seeds + run lengths)."""
    runs = kernels.passage_runs(query.hashes, stored.hashes, (k, minimum, SEEDS_PER_KGRAM))
    return [
        Passage(
            int(query.starts[q_start]),
            int(query.ends[q_end - 1]),
            int(stored.starts[s_start]),
            int(stored.ends[s_end - 1]),
            int(q_end - q_start),
        )
        for q_start, q_end, s_start, s_end in runs.tolist()
    ]


def shared_passages_many(
    query: Tokens, stored: TokenRuns, k: int = DEFAULT_K, minimum: int = DEFAULT_MINIMUM
) -> list[list[Passage]]:
    """``shared_passages`` of a query with each of several texts, in one compiled call:
    the query's k-grams are hashed and tabled once, each stored k-gram looked up once.
    O(n + M + seeds log seeds + run lengths) for M stored tokens in all."""
    rows = kernels.passage_runs_many(
        query.kernel_arrays(), (stored.hashes, stored.starts, stored.ends), stored.bounds,
        (k, minimum, SEEDS_PER_KGRAM),
    )  # fmt: skip
    return _passages_by_text(rows, len(stored))


def may_cover(
    shared: Rows, boilerplate: int | Rows, query_keys: int | Rows, stored_keys: Rows, bar: float
) -> npt.NDArray[np.bool_]:
    """Whether each candidate (``shared`` fingerprints with the query, ``stored_keys``
    its own) can share passages covering ``bar`` of the query or of itself, the query
    having ``query_keys`` fingerprints, ``boilerplate`` of them too common to be counted
    (it may share those too); each of those an int, or one a candidate (the rule:
    ``candidate_kernels.covers``). O(candidates)."""
    arrays = np.broadcast_arrays(shared, boilerplate, query_keys, stored_keys)
    ready = [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
    return candidate_kernels.may_cover_many(ready[0], ready[1], ready[2], ready[3], float(bar))


def shared_passages_texts(
    query: Tokens, texts: Sequence[str], k: int = DEFAULT_K, minimum: int = DEFAULT_MINIMUM
) -> list[list[Passage]]:
    """``shared_passages`` of a query with each of several texts as sent, tokenised and
    verified in one compiled call that keeps none of their tokens. O(n + total length +
    seeds log seeds + run lengths)."""
    code_points = _code_points("".join(texts))
    bounds = _bounds(texts)
    rows = kernels.passage_runs_texts(
        query.kernel_arrays(), code_points, bounds, (char_classes(), _folding().table),
        (k, minimum, SEEDS_PER_KGRAM),
    )  # fmt: skip
    return _passages_by_text(rows, len(texts))


def _passages_by_text(rows: npt.NDArray[np.int64], texts: int) -> list[list[Passage]]:
    """The passages of kernel rows (text, start, end, match start, match end, tokens)."""
    found: list[list[Passage]] = [[] for _ in range(texts)]
    for text, start, end, match_start, match_end, tokens in rows.tolist():
        found[text].append(Passage(start, end, match_start, match_end, tokens))
    return found


def coverage(passages: list[Passage], length: int, *, of_match: bool = False) -> float:
    """The share of a text's code points inside passages (0 for an empty text): the
    query's, or with ``of_match`` the stored text's. Overlapping passages count once."""
    if length <= 0 or not passages:
        return 0.0
    if len(passages) == 1:  # the usual: one run, nothing to merge
        only = passages[0]
        return (
            (only.match_end - only.match_start) if of_match else (only.end - only.start)
        ) / length
    spans = sorted((p.match_start, p.match_end) if of_match else (p.start, p.end) for p in passages)
    covered, reach = 0, 0
    for start, end in spans:
        start = max(start, reach)
        if end > start:
            covered += end - start
            reach = end
    return covered / length


def text_hash(text: str) -> int:
    """A text as sent, hashed (xxh3, 64 bits; never 0, which stands for unknown): equal
    hashes of two texts are taken for equal texts, whose passages are known without
    reading either (``identical_passages``). O(length)."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass")) or 1


def identical_passages(tokens: Tokens, minimum: int) -> list[Passage] | None:
    """The passages a text shares with an identical copy, without verifying: the whole
    run of its tokens, when no run of ``minimum`` tokens repeats in it (else the runs
    between its repeats are passages too, and only verification finds them all: None).
    Empty under ``minimum`` tokens. O(n log n) for n tokens."""
    if len(tokens) < minimum:
        return []
    if not kernels.kgrams_distinct(tokens.hashes, minimum):
        return None
    start, end = int(tokens.starts[0]), int(tokens.ends[-1])
    return [Passage(start, end, start, end, len(tokens))]


def spread(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Fingerprints as the table holds them: through MurmurHash3's finaliser, a bijection.
    Winnowing keeps the smallest hash of each window, so fingerprints crowd the low end
    of the key space (the median near 0.12 of it), where a directory bucket then holds
    ten times its share; spread evenly, every lookup's bucket is small (``python -m
    bench.passages --lookups``; docs/journal.md, "Issue 26")."""
    return kernels.spread_keys(np.ascontiguousarray(keys, dtype=np.uint64))


class Hits(NamedTuple):
    """An index lookup of several texts' fingerprints (``PassageIndex.hits``): where each
    text's fingerprints start among them (one more at the end), the fingerprints as
    given, the (position, row) of every entry found, and which fingerprints more than
    ``max_rows`` entries hold (boilerplate, found in no row)."""

    key_bounds: npt.NDArray[np.int64]
    keys: npt.NDArray[np.uint64]
    positions: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    capped: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Candidates:
    """A query's candidate rows, most shared fingerprints first, with how many each
    shares; ``texts``: stored texts of some of them, read already (an insert batch's,
    in one read), by row."""

    rows: Rows
    shared: Rows
    texts: Mapping[int, str] | None = None

    def __len__(self) -> int:
        return len(self.rows)


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_KEYS = np.zeros(0, dtype=np.uint64)
_NO_CAPPED = np.zeros(0, dtype=np.bool_)
NO_CANDIDATES = Candidates(_NO_ROWS, _NO_ROWS)  # what most texts of a batch have
_NO_PAIR = (_NO_ROWS, _NO_ROWS)
# A chunk of a bulk load: (fingerprints, rows, text hashes[, hosts' keys]; None: unknown).
Chunk = (
    tuple[list[npt.NDArray[np.uint64]], Rows, Sequence[int] | None, Sequence[int] | None]
    | tuple[list[npt.NDArray[np.uint64]], Rows, Sequence[int] | None]
)


class PassageIndex(TableIndex):
    """Rows by the winnowed fingerprints of their texts.

    Memory: 8 bytes an entry in the sorted arrays (the top 32 bits of the spread
    fingerprint, and the row), about 2 / (window + 1) entries a token: some 900 bytes
    for a 3 KB English text with the defaults; and 16 bytes a row (its count of
    fingerprints, its text's hash, its host's key). Search: one sorted lookup per query
    fingerprint, O(f log N).

    Keys of 32 bits: two fingerprints that differ share their top halves once in 2^32
    (with 100M distinct ones held, one query fingerprint in some 40 meets another's).
    Such a hit only adds a candidate, or one shared fingerprint to a candidate's count,
    and verification decides every candidate. (A fingerprint whose top half is also that
    of a boilerplate one is capped with it: some 10,000 boilerplate keys in 2^32.)
    """

    one_entry_a_row = False

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        # Per row: its count of fingerprints, what a candidate's shared ones are measured
        # against (``may_cover``), its text's hash (``text_hash``, low and high words;
        # 0: unknown), what tells a copy of the query, and its host's key
        # (``hosts.host_key``; 0: none), what tells its host's chrome. 16 bytes a row.
        self._per_row = RowArray(np.uint32, (4,))
        # Keys spread evenly: their top halves, uint32.
        super().__init__(lanes=1, values=self._per_row, uniform=True, key_type=np.uint32)
        self.max_rows = max_rows

    def insert_row(
        self, keys: npt.NDArray[np.uint64], row: int, text_hash: int = 0, host: int = NO_HOST
    ) -> None:
        """A text's fingerprints (``fingerprints``) under its row."""
        self.insert_many([keys], np.array([row], dtype=np.int64), [text_hash], [host])

    def insert_many(
        self,
        keys: list[npt.NDArray[np.uint64]],
        rows: Rows,
        text_hashes: Sequence[int] | None = None,
        hosts: Sequence[int] | None = None,
    ) -> None:
        """Texts' fingerprints under their rows (rows numbered once, never reused), with
        their texts' ``text_hash`` (None: unknown, every candidate is verified) and their
        hosts' keys (None: none known)."""
        entries = self._entries(keys, rows, text_hashes, hosts)
        if entries is not None:
            self._table.insert(*entries)

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        """``insert_many`` of each (fingerprints, rows, text hashes, hosts) chunk, as one
        bulk load (a restart's every text): the chunks' entries are sorted apart and merged once at
        the end, their memory given back as the merge passes it (RunBuilder), so that the
        load holds about one copy of the table where merging chunk by chunk held two."""
        builder = RunBuilder(lanes=1, key_type=self._table.key_type)
        for keys, rows, text_hashes, *known_hosts in chunks:
            hosts = known_hosts[0] if known_hosts else None
            entries = self._entries(keys, rows, text_hashes, hosts)
            if entries is not None:
                builder.add(*entries)
        self._table.insert_run(builder.finish())

    def _entries(
        self,
        keys: list[npt.NDArray[np.uint64]],
        rows: Rows,
        text_hashes: Sequence[int] | None = None,
        hosts: Sequence[int] | None = None,
    ) -> tuple[npt.NDArray[np.uint32], Rows] | None:
        """The table's (keys (m, 1), rows) of texts' fingerprints, their rows claimed; None
        when no text has a fingerprint (a text under k tokens has none: not held)."""
        counts = np.array([len(k) for k in keys], dtype=np.int64)
        held = counts > 0
        if not held.any():
            return None
        claimed = self._rows.claim(np.asarray(rows, dtype=np.int64)[held])
        self._per_row.ensure(self._rows.present.size)
        per_row = self._per_row.array
        per_row[claimed, 0] = counts[held]
        if text_hashes is not None:  # its low word, then its high one
            hashes = np.array(text_hashes, dtype="<u8")[held]
            per_row[claimed, 1:3] = hashes.view("<u4").reshape(-1, 2)
        if hosts is not None:
            per_row[claimed, 3] = np.array(hosts, dtype=np.uint32)[held]
        entries = top_halves(spread(np.concatenate(keys))).reshape(-1, 1)
        return entries, np.repeat(claimed, counts[held])

    def candidates(self, keys: npt.NDArray[np.uint64]) -> tuple[Rows, Rows]:
        """(rows, shared fingerprints) of the live rows sharing at least one of ``keys``
        that at most ``max_rows`` entries hold, most shared first (ties by row)."""
        return self.candidates_many([keys])[0]

    def candidates_many(self, keys: Sequence[npt.NDArray[np.uint64]]) -> list[tuple[Rows, Rows]]:
        """``candidates`` of several texts' fingerprints in one lookup (an insert batch):
        O(F log N) for F fingerprints in all, then a sort of what they found."""
        return self.candidates_counted(keys)[0]

    def candidates_counted(
        self,
        keys: Sequence[npt.NDArray[np.uint64]],
        bar: float | None = None,
        near: tuple[Rows, Rows] | None = None,
    ) -> tuple[list[tuple[Rows, Rows]], Rows]:
        """(``candidates_many``, each text's count of boilerplate fingerprints: those more
        than ``max_rows`` rows hold, which it may share with any row uncounted). With a
        ``bar``, only the candidates that may cover it (``may_cover``) and those of the
        (text, row) pairs ``near`` (its near-duplicates), for every text at once."""
        found, boilerplate, _ = self.candidates_hosted(keys, bar, near)
        return found, boilerplate

    def hits(self, keys: Sequence[npt.NDArray[np.uint64]]) -> Hits:
        """The entries holding several texts' fingerprints: one compiled lookup, read
        only (an insert makes it on another core while it matches, under its write
        lock: no row changes meanwhile). O(F log N + hits)."""
        key_bounds = _bounds(keys)
        if not key_bounds[-1]:
            return Hits(key_bounds, _NO_KEYS, _NO_ROWS, _NO_ROWS, _NO_CAPPED)
        raw = keys[0] if len(keys) == 1 else np.concatenate(keys)
        spread_keys, order = kernels.spread_sorted(raw)
        flat = top_halves(spread_keys)  # sorted by ``order`` still
        capped = np.zeros(len(flat), dtype=np.bool_)
        positions, rows = self._table.lookup_equal_many(
            0, flat, self.max_rows, self._rows.deleted.array, capped, order
        )
        return Hits(key_bounds, raw, positions, rows, capped)

    def candidates_hosted(
        self,
        keys: Sequence[npt.NDArray[np.uint64]],
        bar: float | None = None,
        near: tuple[Rows, Rows] | None = None,
        hosts: Sequence[int] | None = None,
        excludes: Sequence[int] | None = None,
        looked_up: Hits | None = None,
    ) -> tuple[list[tuple[Rows, Rows]], Rows, list[HostPages]]:
        """``candidates_counted`` of texts whose hosts' keys are ``hosts`` (None: none
        known), and what the stored pages of each one's host hold of its fingerprints
        (app/core/hosts.py): its host's chrome counts for none of them; ``excludes``:
        each text's own row (-1: none), not one of those pages; ``looked_up``: the
        ``hits`` of ``keys``, where made already. O(F log N + hits)."""
        hits = self.hits(keys) if looked_up is None else looked_up
        key_bounds, raw, positions, rows, capped = hits
        pages_of = [NO_PAGES] * len(keys)
        if not key_bounds[-1]:
            empty = np.zeros(0, dtype=np.int64)
            return [(empty, empty) for _ in keys], np.zeros(len(keys), dtype=np.int64), pages_of
        if hosts is not None and any(host != NO_HOST for host in hosts) and len(rows):
            keep, pages = host_hits(
                positions, rows, self._per_row.array[rows, 3], key_bounds, hosts,
                [-1] * len(keys) if excludes is None else excludes,
            )  # fmt: skip
            positions, rows = positions[keep], rows[keep]
            pages_of = [
                NO_PAGES if host == NO_HOST else HostPages.of(raw[start:end], pages[start:end])
                for host, (start, end) in zip(
                    hosts, itertools.pairwise(key_bounds.tolist()), strict=True
                )
            ]
        near_texts = near_rows = _NO_ROWS
        if bar and near is not None and len(near[0]):  # bar 0: every candidate kept
            near_texts, near_rows = near[0].astype(np.int64), near[1].astype(np.int64)
        # numpy's sort of the hits' codes (text << 32 | row): several times as fast as a
        # compiled one.
        if len(keys) == 1:  # a search: every hit is the one text's (owner 0)
            codes = np.sort(rows.astype(np.int64, copy=False))
        else:
            owners = np.searchsorted(key_bounds, positions, side="right") - 1
            codes = np.sort(owners << 32 | rows)
        found, shared, bounds, boilerplate = candidate_kernels.counted_candidates(
            codes, key_bounds, capped, self._per_row.array,
            0.0 if bar is None else float(bar), near_texts, near_rows,
        )  # fmt: skip
        ends = bounds.tolist()
        return (
            [
                (found[start:end], shared[start:end]) if end > start else _NO_PAIR
                for start, end in itertools.pairwise(ends)
            ],
            boilerplate,
            pages_of,
        )

    def hosts(self, rows: Rows) -> npt.NDArray[np.uint32]:
        """The hosts' keys of rows held (NO_HOST: none known). O(rows)."""
        hosts: npt.NDArray[np.uint32] = self._per_row.array[np.asarray(rows, dtype=np.int64), 3]
        return hosts

    def identical(self, rows: Rows, text_hash: int) -> npt.NDArray[np.bool_]:
        """Whether each row's text is the one of ``text_hash`` (rows held, none
        unknown). O(rows)."""
        halves = self._per_row.array[np.asarray(rows, dtype=np.int64), 1:3].tolist()
        return np.array([low | high << 32 == text_hash for low, high in halves], dtype=np.bool_)

    def _check(self) -> None:
        self._check_rows()
