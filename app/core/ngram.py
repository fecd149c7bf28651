"""NgramIndex: every stored short text whose q-gram set has Jaccard >= t with a query's.

Exact set-similarity search (AllPairs / PPJoin, Xiao, Wang, Lin, Yu, "Efficient Similarity
Joins for Near Duplicate Detection", WWW 2008) over the sets of character q-grams of
texts the caller has already normalised (``app.core.text.normalize``: the service
normalises every text once for all its indexes). A text's q-grams are its substrings of q
characters, one at each position where one fits, q being ``cjk_size`` at a CJK character
(``CJK_RANGES``) and ``size`` at any other (``cjk_size`` None: ``size`` everywhere, one q
for every text); a text where none fits (shorter than q) has one q-gram, the whole text;
an empty text has none and matches nothing.

Filters, all exact (no set with Jaccard >= t is ever filtered out):

- **Prefix filter, with k meetings** (AllPairs; the l-prefix scheme of Wang, Li and Feng,
  "Can We Beat the Prefix Filtering?", SIGMOD 2012). Fix one global order of all tokens.
  If J(x, y) >= t, x and y share o >= ceil(t max(|x|, |y|)) tokens, and at most |y| - o
  tokens of y are not shared, so the first |y| - ceil(t |y|) + k tokens of y in that
  order hold its first k shared tokens (when o >= k). Each stored set puts that prefix
  (for the index's threshold and k = ``prefix_matches``) in the index; a query probes
  its own prefix for its threshold, and a stored set becomes a candidate only when it
  meets the query in k tokens (in min(k, o) for sets so small that o < k is possible).
  k = 1 is plain prefix filtering; every extra k costs one entry (12 bytes) per set and
  cuts the candidates several-fold (bench/ngram.py: English titles at 100K, 158
  candidates a query for k = 1, 8.7 for k = 3).
- **Length filter.** J(x, y) >= t needs t |x| <= |y| <= |x| / t. The set size is a field
  of every entry's key just below the token, so the entries of a token with an
  admissible size are one key range: no entry of the wrong length is even read.
- **Positional filter** (PPJoin). The m-th shared token sits at position i of x and j of
  y with i <= |x| - o + m - 1 and j <= |y| - o + m - 1, o >= ceil(t (|x| + |y|) / (1 +
  t)) the fewest shared tokens for Jaccard t. The position is the lowest field of the
  key, so within a size the entries that pass are the first ones of the (token, size)
  group: one gallop finds where they end and they are copied without a test each, a
  second skips the rest of the group; the query position bounds the sizes worth reading
  at all. With m = 1 the bounds (slack 0) hold for the first shared token: an entry past
  them can only be a later meeting of a row, so it counts for a row met before and never
  starts one, and a row first met by the last k - 1 probes is never counted (it cannot
  reach k). At 1M texts this keeps the count table to the rows that can still match.
- **Verification** of each candidate by the exact Jaccard of the two q-gram sets,
  |x ∩ y| / |x ∪ y| >= t compared in float64 exactly as ``len(a & b) / len(a | b) >= t``
  is in Python; it stops as soon as the overlap is out of reach. Candidates are verified
  in blocks of 32 whose per-row values and texts are prefetched together (a candidate's
  text is a cache miss at 1M texts: verification time halved). Bounds derived from the
  float threshold are loosened by a hair, never tightened, so rounding drops nothing.

Worked example, t = 0.7, k = 1, x = a 40-character title (38 distinct 3-grams). Its
prefix is 38 - 27 + 1 = 12 tokens; admissible sizes 27 to 54. A stored title y of 38
3-grams that differs by one character shares 35 of them: o >= ceil(0.7 x 76 / 1.7) = 32,
so their first shared token is among the first 7 of both orders, and one of x's 12
probes meets y's entry at positions (i, j) <= (6, 6). Verification: 35 / 41 = 0.854.

**Token order.** Rarer tokens first makes prefixes rare and candidates few (the AllPairs
ordering): with a pure hash order a query's prefix nearly always holds a few trigrams
of common words and drags in hundreds of candidates (bench/ngram.py: 324 a query
against 8.7 with the learned order). Document frequencies change as data arrives, and
every stored prefix must use the same order as every query, so the order is learned
and then frozen: the key of a token is its document frequency in a sample of up to
ORDER_SAMPLE_ROWS stored sets (0, the rarest, for tokens seen once or never) above the
bits of ``fmix64(code)``. Until ORDER_FIRST_ROWS sets are stored the order is the hash
alone (a first insert of that many learns it at once: a restart's bulk load). A merge
learns it again whenever the index has grown ORDER_GROWTH-fold since it was learned
(ORDER_REFRESH_GROWTH-fold once it came from a full sample): it rebuilds every entry
under the new order beside the old table and swaps both in at once (inserts meanwhile go
to the old table and are re-keyed at the swap), so readers always see one consistent
order. Rebuilds at geometric sizes cost O(1) amortised per set.

**Thresholds.** The prefixes stored are those of the index's threshold. A query may ask
for any threshold from that one up to 1 (the stored prefixes are then longer than it
needs); a lower one cannot be answered exactly from them and is refused (ValueError),
as HammingIndex refuses a distance above its own.

**q, per script.** ``size``, default 3, and ``cjk_size`` for grams that start at a CJK
character, 2 in the service's new collections (bench/ngram.py, sections 1 and 6;
docs/benchmarks.md). On Reuters titles of 30+ characters with 2 character edits, q = 3
keeps 98% of the copies at t = 0.7 (q = 4: 70%, q = 5: 37%), and it matches fewer
distinct titles than q = 2 (1,092 pairs against 1,753 at 0.7). Chinese texts of 20-40
characters lose more to an edit (a character is a morpheme, a word is 1-4 of them): at
t = 0.7, q = 2 keeps 96% of 2-edit copies, q = 3 58%, q = 4 21%, with no false pair on
the planted corpus for any; the m >= 4 some use for Chinese would miss most of them. The
q of a gram is that of its first character, so an edit changes only the grams around it
in mixed text too, and the similarity is still the Jaccard of two sets that depend on
the texts alone: every filter here holds for it unchanged. q-grams of up to 3 characters
are coded exactly in 64 bits (21 bits per code point; with two q, those below 3 carry
their length), so the Jaccard of codes is that of the q-gram sets; above 3 they are
64-bit hashes.

**Layout.** One SortedTable lane, one entry per prefix token of each stored set (12
bytes: uint64 key, int32 row), several entries per row::

    key = top 48 bits of fmix64(code) | min(|y|, 255) << 8 | min(position, 255)

(a size or position of 255 or more is stored as 255, which only loosens the filters; the
real size is then read from the per-row array). The texts are kept, packed at 1, 2 or 4
bytes per character (the smallest that holds the text's largest code point), and q-grams
are recomputed from them for verification and rebuilds: a 60-character title costs 60
bytes instead of 8 bytes per distinct q-gram.

Memory per stored text of g distinct q-grams and c characters: 12 (g - ceil(t g) + k)
bytes of entries + c x width bytes of text + 19 bytes of per-row arrays; 262 bytes a
text on average at 1M (half 40-80-character English, half 20-40-character Chinese,
t = 0.7, k = 3), plus the order's table (768 KB at most).

Costs, for a text of c characters and g q-grams: insert O(g log g) plus the SortedTable
insert of its prefix entries; search O(p (log N + entries of the token with an admissible
size and position) + candidates x c), p = the query's prefix length; learning the order
O(sample g log) and a rebuild O(N g log g), in a merge.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core import _gram_kernels as gram_kernels
from app.core import _ngram_kernels as kernels
from app.core.fingerprint import code_points_of
from app.core.packed_texts import PackedTexts
from app.core.row_array import RowBook
from app.core.saved import (
    SavedArrays,
    SavedStateError,
    nested,
    part,
    read_scalars,
    scalars,
    wanted,
)
from app.core.sorted_table import SortedTable
from app.core.template import figures_key
from app.core.types import Backlog, Rows

CodePoints = npt.NDArray[np.uint32]
Offsets = npt.NDArray[np.int64]
Similarities = npt.NDArray[np.float64]
_NO_KEYS = np.zeros(0, dtype=np.uint64)  # no figures keys: the template rule not applied

DEFAULT_SIZE = 3
# q of the grams that start at a CJK character, where a collection does not say (the
# service's default; NgramIndex's own default is one q for every text): bench/ngram.py,
# section 6, and docs/benchmarks.md.
DEFAULT_CJK_SIZE = 2
# The characters whose grams have ``cjk_size`` characters, inclusive ranges of code points
# (``_gram_kernels.is_cjk`` tests the same): Hangul Jamo, CJK and Kangxi radicals, CJK
# symbols and punctuation, kana, Bopomofo, Hangul compatibility Jamo, Bopomofo extended,
# kana extensions, CJK extension A, CJK unified ideographs, Hangul Jamo extended A, Hangul
# syllables and Jamo extended B, CJK compatibility ideographs, CJK extensions B to H. A
# Han character or a Hangul syllable is a morpheme or a syllable, and a word is 1-4 of
# them. Thai, Lao, Khmer and Myanmar are written without spaces too, but with letters:
# their grams have ``size`` characters.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),
    (0x2E80, 0x2FDF),
    (0x3000, 0x303F),
    (0x3040, 0x30FF),
    (0x3100, 0x318F),
    (0x31A0, 0x31BF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0x20000, 0x323AF),
)
DEFAULT_THRESHOLD = 0.7
MAX_SIZE = 8
DEFAULT_PREFIX_MATCHES = 3
MAX_PREFIX_MATCHES = 8
# The order is first learned once this many sets are stored: below it candidate lists are
# short whatever the order, and a sample this size already ranks the common q-grams.
ORDER_FIRST_ROWS = 4096
# ... and learned again each time the index has grown this many times over since, so
# rebuilds cost O(1) amortised per set (4: a rebuild at N follows one at N / 4) ...
ORDER_GROWTH = 4
# ... or, once it was learned from a full sample of ORDER_SAMPLE_ROWS sets, this many
# times: frequencies from a full sample are already good, and a rebuild at N costs as
# much as N inserts (at 1M texts the rebuild at 640K was a quarter of the insert time).
ORDER_REFRESH_GROWTH = 16
# Document frequencies are counted in at most this many stored sets, evenly spaced over
# the rows: enough to rank every q-gram that matters for candidates, and a bounded cost.
ORDER_SAMPLE_ROWS = 65_536
# At most this many of the commonest q-grams get a class above 0 (6 bytes a slot at load
# 1/2: 768 KB, in L2; a larger table of 64-bit keys spills to L3 and every text inserted
# pays its misses: bench/ngram.py); the rest are rare by any measure that matters here.
ORDER_MAX_ENTRIES = 1 << 16
# The table's unsorted tail: single inserts (about 20 entries each at t = 0.7) fill it
# and flush it, sorted, into the buffer, a copy of the buffer that at 1M texts costs
# milliseconds: 4,096 entries flush once per ~200 texts instead of once per ~12 (the
# default 256). A query reads the tail once, looking each entry's token up among its
# probes, so its cost does not grow with the probes.
TAIL_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class QgramOrder:
    """The global token order: frequency classes of common codes, in an open-addressing
    table (``table_classes`` 0 marks an empty slot); a code not in it has class 0.

    ``learned_rows`` is how many sets were stored when it was learned (0: the hash order).
    """

    table_codes: npt.NDArray[np.uint32]  # fingerprints: the high 32 bits of fmix64(code)
    table_classes: npt.NDArray[np.uint16]
    learned_rows: int

    @staticmethod
    def by_hash() -> QgramOrder:
        """The order of ``fmix64(code)`` alone: needs no statistics, never changes."""
        return QgramOrder(np.zeros(0, np.uint32), np.zeros(0, np.uint16), 0)

    @staticmethod
    def from_sets(codes: npt.NDArray[np.uint64], learned_rows: int) -> QgramOrder:
        """Classes from document frequencies: ``codes`` holds each sampled set's distinct
        codes end to end. Class floor(log2 df) for df >= 2, the commonest
        ORDER_MAX_ENTRIES codes only. O(n log n) for n codes."""
        distinct, frequencies = np.unique(codes, return_counts=True)
        common = frequencies >= 2
        distinct, frequencies = distinct[common], frequencies[common]
        if len(distinct) > ORDER_MAX_ENTRIES:
            keep = np.argpartition(-frequencies, ORDER_MAX_ENTRIES)[:ORDER_MAX_ENTRIES]
            distinct, frequencies = distinct[keep], frequencies[keep]
        classes = np.minimum(frequencies, gram_kernels.MAX_CLASS).astype(np.uint16)
        capacity = 16
        while capacity < 2 * len(distinct):
            capacity *= 2
        table_codes, table_classes = gram_kernels.build_order_table(distinct, classes, capacity)
        return QgramOrder(table_codes, table_classes, learned_rows)

    @property
    def nbytes(self) -> int:
        return int(self.table_codes.nbytes + self.table_classes.nbytes)

    def saved_arrays(self) -> SavedArrays:
        return {
            "codes": self.table_codes,
            "classes": self.table_classes,
            "learned": scalars([self.learned_rows]),
        }

    @staticmethod
    def from_saved(arrays: SavedArrays) -> QgramOrder:
        codes, classes = wanted(arrays, "codes"), wanted(arrays, "classes")
        if codes.dtype != np.uint32 or classes.dtype != np.uint16 or codes.shape != classes.shape:
            raise SavedStateError("a saved q-gram order has other types or lengths")
        (learned,) = read_scalars(arrays, "learned", 1)
        return QgramOrder(codes, classes, learned)


@dataclass(frozen=True, slots=True)
class _State:
    """What a reader needs to agree with itself: the order the table's keys were made with."""

    order: QgramOrder
    table: SortedTable


def code_points(texts: Sequence[str]) -> tuple[CodePoints, Offsets]:
    """(code points of all texts end to end, offsets): text d at [offsets[d], offsets[d+1]).

    Lone surrogates are code points like any other here (``surrogatepass``). O(total).
    """
    count = len(texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=count)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return code_points_of("".join(texts)), offsets


def gram_sets(
    texts: Sequence[str], size: int = DEFAULT_SIZE, cjk_size: int | None = None
) -> list[npt.NDArray[np.uint64]]:
    """The distinct q-gram codes of each normalised text, ascending: the sets whose
    Jaccard NgramIndex compares (for a store that keeps its own index, app/backends/redis/store).

    >>> [codes.size for codes in gram_sets(["quake hits tokyo", "ab", ""], 3)]
    [14, 1, 0]
    """
    if not texts:
        return []
    data, starts, chars, widths, _ = gram_kernels.pack_texts(*code_points(texts), False)
    codes, ends = gram_kernels.code_sets(
        (data, starts, chars, widths),
        np.arange(len(texts), dtype=np.int64),
        (size, size if cjk_size is None else cjk_size),
    )
    return np.split(codes, ends[:-1])


class NgramIndex:
    """Exact Jaccard search over character q-gram sets of short, normalised texts.

    One writer at a time may call ``insert`` and ``delete``; ``merge`` may run in another
    thread at the same time, and any number of readers search concurrently with both.

    >>> index = NgramIndex(threshold=0.5, size=3)
    >>> index.insert(["quake hits tokyo", "quake hits tokyo, 5 dead", "rain"], [0, 1, 2])
    >>> rows, similarities = index.search("quake hits tokyo")
    >>> rows.tolist(), [round(s, 3) for s in similarities.tolist()]
    ([0, 1], [1.0, 0.636])
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        size: int = DEFAULT_SIZE,
        learn_order: bool = True,
        prefix_matches: int = DEFAULT_PREFIX_MATCHES,
        cjk_size: int | None = None,
        same_numbers: bool = False,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be above 0 and at most 1, not {threshold}")
        if not 1 <= size <= MAX_SIZE:
            raise ValueError(f"size must be 1 to {MAX_SIZE}, not {size}")
        if cjk_size is not None and not 1 <= cjk_size <= MAX_SIZE:
            raise ValueError(f"cjk_size must be 1 to {MAX_SIZE}, not {cjk_size}")
        if not 1 <= prefix_matches <= MAX_PREFIX_MATCHES:
            raise ValueError(
                f"prefix_matches must be 1 to {MAX_PREFIX_MATCHES}, not {prefix_matches}"
            )
        self.threshold = threshold
        self.size = size
        # q of the grams that start at a CJK character (None: size, one q for every text).
        self.cjk_size = size if cjk_size is None else cjk_size
        self.prefix_matches = prefix_matches
        self.learn_order = learn_order
        self.same_numbers = same_numbers  # matches stating other numbers are dropped
        self._state = _State(QgramOrder.by_hash(), SortedTable(lanes=1, tail_capacity=TAIL_ENTRIES))
        self._rows = RowBook()
        self._texts = PackedTexts()
        self._write_lock = threading.Lock()  # insert against a rebuild's swap
        self._merge_lock = threading.Lock()
        self._rebuild_log: list[Rows] | None = None  # rows inserted during a rebuild

    def __len__(self) -> int:
        """Live texts (inserted and not deleted)."""
        return self._rows.live

    @property
    def order(self) -> QgramOrder:
        return self._state.order

    # ------------------------------------------------------------ writes

    def insert(self, texts: Sequence[str], rows: npt.NDArray[np.integer] | Sequence[int]) -> None:
        """Store normalised texts under new row numbers (never reused) and index them.

        Cost: O(g log g) per text of g q-grams, in compiled code, plus the SortedTable
        insert of its prefix entries (about 0.3 g at t = 0.7).
        """
        self.insert_code_points(*code_points(texts), rows)

    def insert_code_points(
        self,
        points: CodePoints,
        offsets: Offsets,
        rows: npt.NDArray[np.integer] | Sequence[int],
    ) -> None:
        """``insert`` for texts given as code points end to end (see ``code_points``)."""
        points = np.ascontiguousarray(points, dtype=np.uint32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if len(offsets) - 1 != len(rows):
            raise ValueError("one row number per text")
        data, starts, chars, widths, figure_keys = gram_kernels.pack_texts(
            points, offsets, self.same_numbers
        )
        with self._write_lock:
            claimed = self._rows.claim(np.asarray(rows))
            if len(claimed) == 0:
                return
            # Texts are stored before their rows enter the table: a reader that finds a
            # row can always verify it.
            packed = (data, starts, chars, widths, figure_keys if self.same_numbers else None)
            self._texts.store(claimed, self._rows.present.size, *packed)
            state = self._state
            if self._should_learn_from_batch(state, len(claimed)):
                state = _State(self._learn(claimed, len(claimed)), state.table)
                self._state = state
            self._index_rows(state, claimed)
            if self._rebuild_log is not None:
                self._rebuild_log.append(claimed)

    def _should_learn_from_batch(self, state: _State, batch: int) -> bool:
        """A first batch large enough to learn the order from (a restart's bulk load):
        learning it now saves rebuilding every entry at the next merge."""
        return (
            self.learn_order
            and state.order.learned_rows == 0
            and len(state.table) == 0
            and batch >= ORDER_FIRST_ROWS
            and self._rebuild_log is None
        )

    def _postings(
        self, order: QgramOrder, rows: Rows
    ) -> tuple[npt.NDArray[np.uint64], Rows, npt.NDArray[np.int32]]:
        """(keys, rows) of the prefix entries of stored rows under ``order``, and the
        rows' set sizes."""
        postings = gram_kernels.set_postings
        result: tuple[npt.NDArray[np.uint64], Rows, npt.NDArray[np.int32]] = postings(
            self._texts.kernel_arrays(),
            rows,
            (self.size, self.cjk_size),
            (self.threshold, self.prefix_matches),
            (order.table_codes, order.table_classes),
        )
        return result

    def _index_rows(self, state: _State, rows: Rows) -> None:
        keys, entry_rows, sizes = self._postings(state.order, rows)
        self._texts.sizes.array[rows] = sizes
        state.table.insert(keys.reshape(-1, 1), entry_rows)

    def delete(self, rows: npt.NDArray[np.integer] | Sequence[int]) -> None:
        """Tombstone rows: filtered from results at once, dropped at the next merge."""
        self._rows.tombstone(np.asarray(rows))

    # ------------------------------------------------------------ reads

    def _bar(self, threshold: float | None) -> float:
        bar = self.threshold if threshold is None else float(threshold)
        if not self.threshold <= bar <= 1.0:
            raise ValueError(
                f"threshold must be from the index's {self.threshold} to 1, not {bar}: "
                "the stored prefixes are those of the index's threshold"
            )
        return bar

    def search(
        self, text: str, threshold: float | None = None, limit: int | None = None
    ) -> tuple[Rows, Similarities]:
        """(rows, Jaccard) of every live text with Jaccard >= threshold, best first, ties
        by row."""
        # One text: its code points and offsets made directly (a batch's layout costs
        # microseconds that a single search, most of it at 1M texts, would feel).
        points = code_points_of(text)
        offsets = np.array([0, len(points)], dtype=np.int64)
        _, rows, similarities, _ = self._search(points, offsets, threshold)
        if limit is None:
            return rows, similarities
        return rows[:limit], similarities[:limit]

    def search_many(
        self, texts: Sequence[str], threshold: float | None = None, same_numbers: bool = True
    ) -> tuple[Rows, Rows, Similarities]:
        """Search a batch: (ends, rows, similarities), query i's matches at
        [ends[i-1], ends[i]), best first (ties by row), exactly as ``search`` returns them.

        Cost per query: p (binary searches + entries of the token with an admissible
        size) + candidates x c, for p prefix tokens and c characters per candidate.
        """
        return self.search_many_code_points(*code_points(texts), threshold, same_numbers)

    def search_many_code_points(
        self,
        points: CodePoints,
        offsets: Offsets,
        threshold: float | None = None,
        same_numbers: bool = True,
    ) -> tuple[Rows, Rows, Similarities]:
        """``search_many`` for texts given as code points end to end; ``same_numbers``
        False sets the index's template rule aside (what an explained search compares)."""
        ends, rows, similarities, _ = self._search(points, offsets, threshold, same_numbers)
        return ends, rows, similarities

    def candidate_counts(
        self, texts: Sequence[str], threshold: float | None = None
    ) -> npt.NDArray[np.int64]:
        """Distinct rows each query verifies (what the filters let through)."""
        return self._search(*code_points(texts), threshold)[3]

    def _search(
        self,
        points: CodePoints,
        offsets: Offsets,
        threshold: float | None,
        same_numbers: bool = True,
    ) -> tuple[Rows, Rows, Similarities, npt.NDArray[np.int64]]:
        bar = self._bar(threshold)
        if points.dtype != np.uint32 or not points.flags.c_contiguous:
            points = np.ascontiguousarray(points, dtype=np.uint32)
        if offsets.dtype != np.int64 or not offsets.flags.c_contiguous:
            offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        state = self._state
        snapshot = state.table.snapshot()
        checked = self.same_numbers and same_numbers
        result: tuple[Rows, Rows, Similarities, Rows] = kernels.ngram_search(
            (points.view(np.uint8), offsets),
            (self.size, self.cjk_size),
            (bar, self.prefix_matches),
            (state.order.table_codes, state.order.table_classes),
            self._texts.kernel_arrays(),  # read after the snapshot: every row it holds
            self._texts.sizes.array,
            snapshot.kernel_arrays(),
            self._rows.deleted.array,
            self._texts.figures.array if checked else _NO_KEYS,
        )
        return result

    def text(self, row: int) -> str:
        """The stored text of a row (deleted ones included)."""
        return self._texts.text(row)

    def holds(self, rows: npt.NDArray[np.integer] | Sequence[int]) -> npt.NDArray[np.bool_]:
        """Whether each row was inserted here (deleted ones included)."""
        return self._rows.holds(rows)

    def set_sizes(self, rows: npt.NDArray[np.integer] | Sequence[int]) -> npt.NDArray[np.int32]:
        """Distinct q-grams of each row's text."""
        sizes: npt.NDArray[np.int32] = self._texts.sizes.array[np.asarray(rows, dtype=np.int64)]
        return sizes

    # ------------------------------------------------------------ merges

    def backlog(self) -> Backlog:
        """What the next merge will fold in and drop."""
        return Backlog(self._state.table.unmerged(), self._rows.pending_tombstones)

    def _order_due(self) -> bool:
        learned = self._state.order.learned_rows
        growth = ORDER_REFRESH_GROWTH if learned >= ORDER_SAMPLE_ROWS else ORDER_GROWTH
        return self.learn_order and len(self) >= max(ORDER_FIRST_ROWS, growth * learned)

    def needs_merge(self) -> bool:
        """True when the buffer has grown enough for a merge, or the order is due to be
        learned (again)."""
        return self._state.table.needs_merge() or self._order_due()

    def merge(self, release_below: int = 0) -> bool:
        """Fold the insert buffer into the sorted entries, dropping tombstoned rows; or,
        when the index has grown ORDER_GROWTH-fold since the order was learned, learn it
        again and rebuild every entry under it (O(N g log g), beside inserts and reads).
        Returns False when there was nothing to do or another merge was running.
        ``release_below`` is the other indexes' (TableIndex.merge): this one keeps its
        per-row flags, a byte a row, and gives nothing back."""
        if not self._merge_lock.acquire(blocking=False):
            return False
        try:
            if self._order_due():
                self._rebuild()
                return True
            return self._rows.merge(self._state.table)
        finally:
            self._merge_lock.release()

    def _live_rows(self) -> Rows:
        present = self._rows.present.array[: self._rows.present.size]
        deleted = self._rows.deleted.array[: self._rows.present.size]
        return np.flatnonzero(present & ~deleted).astype(np.int64)

    def _learn(self, rows: Rows, learned_rows: int) -> QgramOrder:
        """An order from the document frequencies in (an even sample of) these rows."""
        if len(rows) > ORDER_SAMPLE_ROWS:
            rows = rows[np.linspace(0, len(rows) - 1, ORDER_SAMPLE_ROWS).astype(np.int64)]
        codes, _ = gram_kernels.code_sets(
            self._texts.kernel_arrays(), rows, (self.size, self.cjk_size)
        )
        return QgramOrder.from_sets(codes, learned_rows)

    def _rebuild(self) -> None:
        """Learn the order from the live rows and build a new table under it, beside the
        current one; then, under the write lock, add the rows inserted meanwhile and swap
        the order and the table in together."""
        with self._write_lock:
            self._rebuild_log = []
            rows = self._live_rows()
        order = self._learn(rows, len(rows))
        table = SortedTable(lanes=1, tail_capacity=TAIL_ENTRIES)
        keys, entry_rows, _ = self._postings(order, rows)
        table.insert(keys.reshape(-1, 1), entry_rows)
        self._rows.merge(table)  # sorted into main, rows deleted meanwhile dropped
        with self._write_lock:
            logged = self._rebuild_log
            self._rebuild_log = None
            if logged:
                late = np.concatenate(logged)
                late = late[~self._rows.deleted.array[late]]
                keys, entry_rows, _ = self._postings(order, late)
                table.insert(keys.reshape(-1, 1), entry_rows)
            self._state = _State(order, table)

    # ------------------------------------------------------------ segments

    def saved_arrays(self) -> SavedArrays:
        """Everything the index holds, for a segment: the table under the order it was
        made with, the row book, the packed texts and the per-row columns. O(tail)."""
        with self._write_lock:
            state = self._state
            arrays = {
                **nested("table", state.table.saved_arrays()),
                **nested("book", self._rows.saved_arrays()),
                **nested("order", state.order.saved_arrays()),
                **nested("texts", self._texts.saved_arrays()),
            }
        return arrays

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's arrays as this empty index's (``saved_arrays``)."""
        order = QgramOrder.from_saved(part(arrays, "order"))
        with self._write_lock:
            self._texts.adopt_saved(part(arrays, "texts"))
            self._rows.adopt_saved(part(arrays, "book"))
            table = SortedTable(lanes=1, tail_capacity=TAIL_ENTRIES)
            table.adopt_saved(part(arrays, "table"))
            self._state = _State(order, table)

    # ------------------------------------------------------------ accounting

    def memory_bytes(self) -> int:
        """Bytes of the entries, the packed texts, the per-row arrays and the order."""
        state = self._state
        per_row = self._texts.nbytes
        return int(state.table.memory_bytes() + per_row + self._rows.nbytes + state.order.nbytes)

    def _check(self) -> None:
        """Assert the table's invariants, that its entries are exactly the prefix entries
        of the stored texts under the current order, and the row bookkeeping."""
        state = self._state
        snapshot = state.table.snapshot()
        state.table._check(one_entry_a_row=False)
        keys = np.concatenate(
            [run.keys[0] for run in (snapshot.main, snapshot.middle, snapshot.buffer)]
            + [snapshot.tail_keys[0, : snapshot.tail_count]]
        )
        rows = state.table.rows().astype(np.int64)
        stored = np.unique(rows)
        expected_keys, expected_rows, sizes = self._postings(state.order, stored)
        assert np.array_equal(self._texts.sizes.array[stored], sizes), "a set size is stale"
        found = np.lexsort((keys, rows))
        wanted = np.lexsort((expected_keys, expected_rows))
        assert np.array_equal(rows[found], expected_rows[wanted]), "entries of a row differ"
        assert np.array_equal(keys[found], expected_keys[wanted]), "an entry key is stale"
        present = np.flatnonzero(self._rows.present.array[: self._rows.present.size])
        empty = present[self._texts.sizes.array[present] == 0]
        self._rows.check(np.concatenate([stored, empty]))
        # Every text's bytes lie inside the store.
        ends = self._texts.starts.array[present] + self._texts.chars.array[present].astype(
            np.int64
        ) * self._texts.widths.array[present].astype(np.int64)
        assert bool(np.all(ends <= self._texts.data.size)), "a text lies outside the store"
        if self.same_numbers:  # every row's figures key is its text's
            for row in present.tolist():
                assert int(self._texts.figures.array[row]) == figures_key(self.text(row)), "figures"
