"""Near-duplicate detection replayed on Reuters-21578: precision, recall and F1 per method.

Run ``.venv/bin/python -m bench.reuters_replay`` from the repository root. For each shingle
setting every story is fingerprinted once, in batches; then the stories are replayed in
``date`` order: each one is looked up among the earlier ones (exact hash, SimHash Hamming
index, one MinHash LSH index per threshold) and then inserted. The pairs found are scored
against the labelled pairs of ``reuters21578.near_dup_pairs.tsv``, and datasketch's
MinHashLSH is replayed the same way for comparison. Writes docs/evaluation.md and prints
it. Deterministic (fixed seeds, no timings in the report); 3 to 5 minutes on one core.
"""

from __future__ import annotations

import csv
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from datasketch import MinHash, MinHashLSH

from app.collection_config import CollectionConfig
from app.core.exact import ExactIndex
from app.core.fingerprint import (
    FingerprintParams,
    Fingerprints,
    ShingleUnit,
    fingerprint_normalized,
    shingle_hashes,
)
from app.core.hamming import HammingIndex
from app.core.lsh import LSHIndex, candidate_probability
from app.core.text import normalize
from devkit.harness import Align, load_reuters, markdown_table, paragraph, reuters_text

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT.parent / "shared/data/reuters21578"
PAIRS_PATH = DATA_DIR / "reuters21578.near_dup_pairs.tsv"
OUTPUT_PATH = REPO_ROOT / "docs" / "evaluation.md"

DEFAULTS = CollectionConfig()  # the service's default collection settings
NUM_PERM = DEFAULTS.minhash.num_perm
SEED = 0
BATCH_SIZE = 256
# The six settings asked for, then word 4 and word 5: recall and precision both improve
# along word 1 -> 2 -> 3, so the sweep continues until the trend turns or the labels'
# own shingle (word 5-grams) is reached.
SETTINGS: tuple[tuple[ShingleUnit, int], ...] = (
    ("char", 5),
    ("char", 4),
    ("char", 3),
    ("word", 1),
    ("word", 2),
    ("word", 3),
    ("word", 4),
    ("word", 5),
)
# Today's defaults (app/collection_config.py): the shingles, then the rule (k, t).
DEFAULT_SETTING: tuple[ShingleUnit, int] = (DEFAULTS.shingle.unit, DEFAULTS.shingle.size)
TODAY_RULE: tuple[int, float] = (DEFAULTS.simhash.max_distance, DEFAULTS.minhash.threshold)
# The former defaults, before this evaluation: character 5-grams with the same k and t.
FORMER_SETTING: tuple[ShingleUnit, int] = ("char", 5)
FORMER_RULE: tuple[int, float] = (3, 0.8)
HAMMING_KS = (3, 4, 6, 8)
# 0.5-0.8 as asked; 0.85 and 0.9 because a character n-gram Jaccard runs well above the
# word 5-gram Jaccard of the labels for the same pair (docs/fingerprints.md).
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9)
NEAR_J = 0.8  # labelled Jaccard at or above this: a near-duplicate (a positive)
RELATED_J = 0.5  # the labels list every pair at or above this
DATASKETCH_THRESHOLD = 0.8
DATASKETCH_SEED = 1  # datasketch's default
# Settings shown with the full grid of combined rules: today's and the former default,
# and the best other.
DETAILED_OTHERS = 1
DETAILED_KS: tuple[int | None, ...] = (None, 3, 4, 6, 8)
DETAILED_TS = (0.7, 0.8, 0.85, 0.9)
COMPACT_KS: tuple[int | None, ...] = (None, 3)
COMPACT_TS = (0.8, 0.85, 0.9)
F1_TARGET = 0.97
EXAMPLES = 8  # false positives listed per inspected rule
# Figures in a text: digit runs and number words. Two texts whose shingles agree once
# every figure is masked differ (almost) only in figures: the same template with other
# numbers, e.g. "fed sets 1.5 billion dlr customer repurchase" / "... one billion ...".
FIGURES = re.compile(
    r"\d[\d.,/]*|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"twenty|thirty|forty|fifty|hundred|thousand|million|billion|half|quarter)\b"
)
FIGURES_ONLY_J = 0.95  # shingle Jaccard of the masked texts at or above this

Rule = tuple[int | None, float | None]  # (k or no SimHash, threshold or no MinHash)


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Corpus:
    """The stories with a non-empty normalised text, in replay (date) order."""

    total: int  # stories in the file
    ids: npt.NDArray[np.int64]
    titles: list[str]
    normalized: list[str]
    skipped: list[int]  # ids left out for an empty text

    def row_of(self) -> dict[int, int]:
        return {int(story_id): row for row, story_id in enumerate(self.ids.tolist())}


@dataclass(frozen=True, slots=True)
class Labels:
    """Labelled pairs by pair key (see pair_keys), with the sets the scores need."""

    jaccard: dict[int, float]
    near: frozenset[int]  # J >= 0.8
    identical: frozenset[int]  # J = 1.0
    same_text: frozenset[int]  # J = 1.0 and equal normalised texts
    related: frozenset[int]  # J in [0.5, 0.8)
    labelled: frozenset[int]  # every labelled pair (J >= 0.5)


def pair_keys(left: npt.NDArray[np.int64], right: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """One int64 per unordered pair of story ids (ids are below 2**31)."""
    low = np.minimum(left, right).astype(np.int64)
    high = np.maximum(left, right).astype(np.int64)
    keys: npt.NDArray[np.int64] = (low << 31) | high
    return keys


def key_ids(key: int) -> tuple[int, int]:
    return key >> 31, key & ((1 << 31) - 1)


def load_corpus() -> Corpus | None:
    stories = load_reuters()  # date order, ties by id
    if stories is None or not PAIRS_PATH.is_file():
        return None
    ids: list[int] = []
    titles: list[str] = []
    texts: list[str] = []
    skipped: list[int] = []
    for story in stories:
        text = normalize(reuters_text(story))
        if text:
            ids.append(int(story["id"]))
            # For display; a story without a title shows the start of its text.
            title = " ".join(str(story.get("title") or "").split())
            titles.append(title or f"({text[:40]}...)")
            texts.append(text)
        else:
            skipped.append(int(story["id"]))
    return Corpus(len(stories), np.array(ids, dtype=np.int64), titles, texts, skipped)


def load_labels(corpus: Corpus) -> Labels:
    row_of = corpus.row_of()
    jaccard: dict[int, float] = {}
    same_text: set[int] = set()
    with PAIRS_PATH.open(encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle, delimiter="\t"):
            a, b = int(record["id_a"]), int(record["id_b"])
            key = int(pair_keys(np.array([a]), np.array([b]))[0])
            jaccard[key] = float(record["jaccard"])
            if (
                jaccard[key] == 1.0
                and a in row_of
                and b in row_of
                and corpus.normalized[row_of[a]] == corpus.normalized[row_of[b]]
            ):
                same_text.add(key)
    return Labels(
        jaccard=jaccard,
        near=frozenset(k for k, j in jaccard.items() if j >= NEAR_J),
        identical=frozenset(k for k, j in jaccard.items() if j == 1.0),
        same_text=frozenset(same_text),
        related=frozenset(k for k, j in jaccard.items() if RELATED_J <= j < NEAR_J),
        labelled=frozenset(jaccard),
    )


# ---------------------------------------------------------------------------- replay


def fingerprint_corpus(corpus: Corpus, params: FingerprintParams) -> Fingerprints:
    parts = [
        fingerprint_normalized(corpus.normalized[begin : begin + BATCH_SIZE], params)
        for begin in range(0, len(corpus.normalized), BATCH_SIZE)
    ]
    return Fingerprints(
        simhash=np.concatenate([part.simhash for part in parts]),
        minhash=np.concatenate([part.minhash for part in parts]),
        exact=np.concatenate([part.exact for part in parts]),
    )


@dataclass(frozen=True, slots=True)
class Found:
    """Pairs (earlier story, current story) each index returned during one replay."""

    exact: frozenset[int]
    hamming: dict[int, int]  # pair -> Hamming distance, for every pair within max(ks)
    lsh: dict[float, frozenset[int]]  # threshold -> pairs its own LSHIndex returned

    def simhash(self, k: int) -> frozenset[int]:
        return frozenset(key for key, distance in self.hamming.items() if distance <= k)

    def rule(self, k: int | None, threshold: float | None) -> frozenset[int]:
        """Near-duplicate if exact hash equal OR Hamming <= k OR estimated J >= threshold."""
        pairs = set(self.exact)
        if k is not None:
            pairs |= self.simhash(k)
        if threshold is not None:
            pairs |= self.lsh[threshold]
        return frozenset(pairs)


class PairLog:
    """Matches collected during a replay, turned into pair keys once at the end."""

    def __init__(self) -> None:
        self.earlier: list[npt.NDArray[np.int64]] = []
        self.current: list[npt.NDArray[np.int64]] = []
        self.values: list[npt.NDArray[np.float64]] = []

    def add(self, row: int, rows: npt.NDArray[np.integer], values: npt.ArrayLike = 0.0) -> None:
        if len(rows):
            self.earlier.append(np.asarray(rows, dtype=np.int64))
            self.current.append(np.full(len(rows), row, dtype=np.int64))
            self.values.append(np.broadcast_to(np.asarray(values, dtype=np.float64), len(rows)))

    def keys(self, ids: npt.NDArray[np.int64]) -> tuple[list[int], list[float]]:
        if not self.earlier:
            return [], []
        earlier = np.concatenate(self.earlier)
        current = np.concatenate(self.current)
        assert np.all(earlier < current), "an index returned a story not inserted before"
        keys = pair_keys(ids[earlier], ids[current])
        return keys.tolist(), np.concatenate(self.values).tolist()


def replay(corpus: Corpus, fp: Fingerprints) -> Found:
    """Query every story against the earlier ones, then insert it (single-row inserts)."""
    exact = ExactIndex()
    hamming = HammingIndex(max_distance=max(HAMMING_KS))
    lsh = {t: LSHIndex(threshold=t, num_perm=NUM_PERM) for t in THRESHOLDS}
    indexes: list[ExactIndex | HammingIndex | LSHIndex] = [exact, hamming, *lsh.values()]
    exact_log, hamming_log = PairLog(), PairLog()
    lsh_logs = {t: PairLog() for t in THRESHOLDS}
    for row in range(len(corpus.normalized)):
        exact_log.add(row, exact.search(fp.exact[row]))
        rows, distances = hamming.search(fp.simhash[row])
        hamming_log.add(row, rows, distances)
        for t, index in lsh.items():
            lsh_logs[t].add(row, index.search(fp.minhash[row])[0])
        one = np.array([row])
        exact.insert(fp.exact[row : row + 1], one)
        hamming.insert(fp.simhash[row : row + 1], one)
        for index in lsh.values():
            index.insert(fp.minhash[row : row + 1], one)
        for any_index in indexes:
            if any_index.needs_merge():
                any_index.merge()
    hamming_keys, hamming_distances = hamming_log.keys(corpus.ids)
    return Found(
        exact=frozenset(exact_log.keys(corpus.ids)[0]),
        hamming={key: int(d) for key, d in zip(hamming_keys, hamming_distances, strict=True)},
        lsh={t: frozenset(log.keys(corpus.ids)[0]) for t, log in lsh_logs.items()},
    )


def datasketch_shingles(text: str, params: FingerprintParams) -> list[bytes]:
    """The setting's distinct shingles as bytes for datasketch's update_batch.

    Character n-grams: the UTF-8 n-gram strings (a text shorter than n is one shingle, as
    in the core). Word n-grams: the core's 64-bit shingle hashes, 8 bytes each, so both
    libraries see the same token n-grams and no tokeniser differs.
    """
    if params.unit == "char":
        n = params.size
        grams = {text[i : i + n] for i in range(len(text) - n + 1)} if len(text) >= n else {text}
        return [gram.encode("utf-8") for gram in sorted(grams)]
    raw = np.unique(shingle_hashes(text, params)).astype("<u8").tobytes()
    return [raw[i : i + 8] for i in range(0, len(raw), 8)]


@dataclass(frozen=True, slots=True)
class DatasketchResult:
    bands: int
    rows: int
    returned: frozenset[int]  # what MinHashLSH.query returned
    verified: frozenset[int]  # of those, the pairs whose MinHash.jaccard >= threshold


def datasketch_replay(corpus: Corpus, params: FingerprintParams) -> DatasketchResult:
    """datasketch MinHashLSH(threshold=0.8, num_perm=128): query, then insert, in date order."""
    lsh = MinHashLSH(threshold=DATASKETCH_THRESHOLD, num_perm=NUM_PERM)
    stored: dict[int, MinHash] = {}
    returned: list[int] = []
    verified: list[int] = []
    for story_id, text in zip(corpus.ids.tolist(), corpus.normalized, strict=True):
        minhash = MinHash(num_perm=NUM_PERM, seed=DATASKETCH_SEED)
        minhash.update_batch(datasketch_shingles(text, params))
        for other in lsh.query(minhash):
            key = int(pair_keys(np.array([other]), np.array([story_id]))[0])
            returned.append(key)
            if minhash.jaccard(stored[other]) >= DATASKETCH_THRESHOLD:
                verified.append(key)
        lsh.insert(story_id, minhash)
        stored[story_id] = minhash
    return DatasketchResult(lsh.b, lsh.r, frozenset(returned), frozenset(verified))


# ---------------------------------------------------------------------------- scoring


@dataclass(frozen=True, slots=True)
class Score:
    found: int
    true_positives: int  # found and labelled J >= 0.8
    labelled_found: int  # found and labelled J >= 0.5
    identical_found: int
    same_text_found: int
    related_found: int
    near_total: int
    identical_total: int
    same_text_total: int
    related_total: int

    @property
    def false_positives(self) -> int:
        return self.found - self.true_positives

    @property
    def precision(self) -> float:
        return self.true_positives / self.found if self.found else 0.0

    @property
    def lenient_precision(self) -> float:
        return self.labelled_found / self.found if self.found else 0.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.near_total

    @property
    def recall_identical(self) -> float:
        return self.identical_found / self.identical_total

    @property
    def recall_related(self) -> float:
        return self.related_found / self.related_total

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    @property
    def all_identical(self) -> bool:
        return self.identical_found == self.identical_total


def score(found: frozenset[int], labels: Labels) -> Score:
    return Score(
        found=len(found),
        true_positives=len(found & labels.near),
        labelled_found=len(found & labels.labelled),
        identical_found=len(found & labels.identical),
        same_text_found=len(found & labels.same_text),
        related_found=len(found & labels.related),
        near_total=len(labels.near),
        identical_total=len(labels.identical),
        same_text_total=len(labels.same_text),
        related_total=len(labels.related),
    )


@dataclass(frozen=True, slots=True)
class SettingResult:
    unit: ShingleUnit
    size: int
    found: Found
    scores: dict[Rule, Score]  # every combination of HAMMING_KS + None and THRESHOLDS + None
    fingerprints: Fingerprints
    datasketch: DatasketchResult | None = None

    @property
    def name(self) -> str:
        return f"{self.unit} {self.size}"

    @property
    def params(self) -> FingerprintParams:
        return FingerprintParams(self.unit, self.size, NUM_PERM, SEED)

    def best(self, every_identical: bool = True) -> tuple[Rule, Score]:
        """The full rule (a k and a threshold) with the best F1, among those finding every
        J = 1.0 pair unless told otherwise; ties go to the higher recall, then the smaller
        k (fewer Hamming tables)."""
        full = [(rule, s) for rule, s in self.scores.items() if None not in rule]
        candidates = [(rule, s) for rule, s in full if s.all_identical or not every_identical]
        return max(
            candidates or full, key=lambda item: (item[1].f1, item[1].recall, -(item[0][0] or 0))
        )


def setting_name(setting: tuple[ShingleUnit, int]) -> str:
    return f"{setting[0]} {setting[1]}"


def rank_key(result: SettingResult) -> tuple[bool, float, float]:
    """Settings ranked by their best rule: every J = 1.0 pair found first, then F1, recall."""
    best = result.best()[1]
    return best.all_identical, best.f1, best.recall


def measure_setting(unit: ShingleUnit, size: int, corpus: Corpus, labels: Labels) -> SettingResult:
    params = FingerprintParams(unit, size, NUM_PERM, SEED)
    fp = fingerprint_corpus(corpus, params)
    found = replay(corpus, fp)
    scores = {
        (k, t): score(found.rule(k, t), labels)
        for k in (None, *HAMMING_KS)
        for t in (None, *THRESHOLDS)
    }
    return SettingResult(unit, size, found, scores, fp)


# ---------------------------------------------------------------------------- inspection


def shingle_set(text: str, params: FingerprintParams) -> set[str] | set[int]:
    if params.unit == "char":
        n = params.size
        return {text[i : i + n] for i in range(len(text) - n + 1)} if len(text) >= n else {text}
    hashes: list[int] = shingle_hashes(text, params).tolist()
    return set(hashes)


def jaccard(a: str, b: str, params: FingerprintParams) -> float:
    set_a, set_b = shingle_set(a, params), shingle_set(b, params)
    return len(set_a & set_b) / len(set_a | set_b)


def mask_figures(text: str) -> str:
    return FIGURES.sub("#", text)


@dataclass(frozen=True, slots=True)
class FalsePositive:
    key: int
    label: float | None  # labelled J, None when below 0.5 (not in the file)
    exact_j: float  # Jaccard of the setting's own shingles
    estimate: float  # MinHash estimate
    hamming: int
    figures_only: bool
    by: str  # which part of the rule found it


def inspect_false_positives(
    result: SettingResult, rule: Rule, corpus: Corpus, labels: Labels
) -> list[FalsePositive]:
    k, t = rule
    row_of = corpus.row_of()
    params = result.params
    fp = result.fingerprints
    out: list[FalsePositive] = []
    for key in sorted(result.found.rule(k, t) - labels.near):
        a, b = (row_of[i] for i in key_ids(key))
        text_a, text_b = corpus.normalized[a], corpus.normalized[b]
        parts = [
            name
            for name, hit in (
                ("exact", key in result.found.exact),
                ("SimHash", k is not None and result.found.hamming.get(key, 99) <= k),
                ("MinHash", t is not None and key in result.found.lsh[t]),
            )
            if hit
        ]
        out.append(
            FalsePositive(
                key=key,
                label=labels.jaccard.get(key),
                exact_j=jaccard(text_a, text_b, params),
                estimate=float(np.mean(fp.minhash[a] == fp.minhash[b])),
                hamming=int(np.bitwise_count(fp.simhash[a] ^ fp.simhash[b])),
                figures_only=jaccard(mask_figures(text_a), mask_figures(text_b), params)
                >= FIGURES_ONLY_J,
                by=" + ".join(parts),
            )
        )
    return out


def simhash_occurrences(corpus: Corpus, params: FingerprintParams) -> npt.NDArray[np.uint64]:
    """The former core SimHash: weight 1 per shingle occurrence (the core now counts each
    distinct shingle once), otherwise the same: bit b set when more than half are set."""
    shifts = np.arange(64, dtype=np.uint64)
    out = np.empty(len(corpus.normalized), dtype=np.uint64)
    for row, text in enumerate(corpus.normalized):
        hashes = shingle_hashes(text, params)
        ones = ((hashes[:, None] >> shifts) & np.uint64(1)).sum(axis=0)
        bits = (2 * ones > len(hashes)).astype(np.uint64)
        out[row] = np.bitwise_or.reduce(bits << shifts)
    return out


def hamming_replay(corpus: Corpus, simhashes: npt.NDArray[np.uint64], k: int) -> dict[int, int]:
    index = HammingIndex(max_distance=k)
    log = PairLog()
    for row in range(len(simhashes)):
        rows, distances = index.search(simhashes[row])
        log.add(row, rows, distances)
        index.insert(simhashes[row : row + 1], np.array([row]))
        if index.needs_merge():
            index.merge()
    keys, found_distances = log.keys(corpus.ids)
    return {key: int(d) for key, d in zip(keys, found_distances, strict=True)}


@dataclass(frozen=True, slots=True)
class WeightingExample:
    key: int
    hamming: int  # under the former (occurrence) weighting
    core_hamming: int  # under the core's (distinct) weighting
    own_j: float  # exact Jaccard of the setting's shingles


@dataclass(frozen=True, slots=True)
class WeightingRow:
    setting: str
    k: int
    core: Score  # the core's SimHash: distinct shingles
    former: Score  # weight per occurrence, as the core had it before
    core_unlabelled: int
    former_unlabelled: int
    # The unlabelled pair only the former weighting found with the lowest own Jaccard.
    example: WeightingExample | None


def simhash_weighting(
    results: Sequence[SettingResult], corpus: Corpus, labels: Labels
) -> list[WeightingRow]:
    rows: list[WeightingRow] = []
    row_of = corpus.row_of()
    for result in results:
        former = hamming_replay(corpus, simhash_occurrences(corpus, result.params), 6)
        simhash = result.fingerprints.simhash
        for k in (3, 6):
            core_pairs = result.found.simhash(k)
            former_pairs = frozenset(key for key, d in former.items() if d <= k)
            examples = []
            for key in sorted(former_pairs - core_pairs - labels.labelled):
                a, b = (row_of[i] for i in key_ids(key))
                examples.append(
                    WeightingExample(
                        key,
                        former[key],
                        int(np.bitwise_count(simhash[a] ^ simhash[b])),
                        jaccard(corpus.normalized[a], corpus.normalized[b], result.params),
                    )
                )
            rows.append(
                WeightingRow(
                    result.name,
                    k,
                    score(core_pairs, labels),
                    score(former_pairs, labels),
                    len(core_pairs - labels.labelled),
                    len(former_pairs - labels.labelled),
                    min(examples, key=lambda e: (e.own_j, e.key), default=None),
                )
            )
    return rows


@dataclass(frozen=True, slots=True)
class Misses:
    """The J >= 0.8 pairs a rule did not find, by cause."""

    threshold: float
    bands: int
    rows: int
    probability_at_threshold: float  # that a pair of Jaccard = threshold is a candidate
    missed: int
    banding: int  # full-signature estimate >= threshold, but never a candidate
    below: int  # estimate below the threshold
    highest_label: float  # the highest labelled J among the missed pairs


def misses(result: SettingResult, rule: Rule, corpus: Corpus, labels: Labels) -> Misses:
    k, t = rule
    threshold = NEAR_J if t is None else t
    row_of = corpus.row_of()
    index = LSHIndex(threshold=threshold, num_perm=NUM_PERM)
    minhash = result.fingerprints.minhash
    missed = sorted(labels.near - result.found.rule(k, t))
    banding = 0
    for key in missed:
        a, b = (row_of[i] for i in key_ids(key))
        banding += bool(np.mean(minhash[a] == minhash[b]) >= threshold)
    return Misses(
        threshold=threshold,
        bands=index.bands,
        rows=index.rows_per_band,
        probability_at_threshold=float(
            candidate_probability(threshold, index.bands, index.rows_per_band)
        ),
        missed=len(missed),
        banding=banding,
        below=len(missed) - banding,
        highest_label=max((labels.jaccard[key] for key in missed), default=0.0),
    )


@dataclass(frozen=True, slots=True)
class IdenticalMiss:
    key: int
    title: str
    own_j: float
    hamming: int
    estimate: float


def identical_misses(
    result: SettingResult, rule: Rule, corpus: Corpus, labels: Labels
) -> list[IdenticalMiss]:
    """J = 1.0 pairs a rule misses, with their Jaccard under the setting's own shingles."""
    row_of = corpus.row_of()
    fp = result.fingerprints
    out = []
    for key in sorted(labels.identical - result.found.rule(*rule)):
        a, b = (row_of[i] for i in key_ids(key))
        out.append(
            IdenticalMiss(
                key=key,
                title=corpus.titles[a],
                own_j=jaccard(corpus.normalized[a], corpus.normalized[b], result.params),
                hamming=int(np.bitwise_count(fp.simhash[a] ^ fp.simhash[b])),
                estimate=float(np.mean(fp.minhash[a] == fp.minhash[b])),
            )
        )
    return out


def label_agreement(result: SettingResult, corpus: Corpus, labels: Labels) -> int:
    """Labelled pairs whose exact Jaccard of the setting's shingles is the labelled J (the
    labels have four decimals)."""
    row_of = corpus.row_of()
    agree = 0
    for key, labelled in labels.jaccard.items():
        a, b = (row_of[i] for i in key_ids(key))
        own = jaccard(corpus.normalized[a], corpus.normalized[b], result.params)
        agree += abs(own - labelled) <= 5e-5 + 1e-12
    return agree


def punctuation_only(result: SettingResult, corpus: Corpus, labels: Labels) -> tuple[int, int]:
    """(J = 1.0 pairs with different normalised texts, those with equal shingle sets)."""
    row_of = corpus.row_of()
    differing = sorted(labels.identical - labels.same_text)
    equal = 0
    for key in differing:
        a, b = (row_of[i] for i in key_ids(key))
        equal += jaccard(corpus.normalized[a], corpus.normalized[b], result.params) == 1.0
    return len(differing), equal


# ---------------------------------------------------------------------------- reporting


def dec(value: float) -> str:
    return f"{value:.3f}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def rule_name(rule: Rule) -> str:
    k, t = rule
    parts = ["exact"]
    if k is not None:
        parts.append(f"SimHash <= {k}")
    if t is not None:
        parts.append(f"MinHash >= {t}")
    return " + ".join(parts)


def short_rule(setting: str, rule: Rule) -> str:
    k, t = rule
    return f"{setting}-grams, k = {k}, t = {t}"


SCORE_HEADERS = [
    "method",
    "found",
    "TP",
    "FP",
    "precision",
    "lenient precision",
    "recall J>=0.8",
    "recall J=1.0",
    "recall [0.5,0.8)",
    "F1",
]


def score_cells(name: str, s: Score) -> list[str]:
    return [
        name,
        f"{s.found:,}",
        str(s.true_positives),
        f"{s.false_positives:,}",
        dec(s.precision),
        dec(s.lenient_precision),
        dec(s.recall),
        f"{dec(s.recall_identical)} ({s.identical_found})",
        dec(s.recall_related),
        dec(s.f1),
    ]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    """Markdown table: the first ``text_columns`` left-aligned, the rest right-aligned."""
    align: list[Align] = ["left" if i < text_columns else "right" for i in range(len(headers))]
    return markdown_table(headers, rows, align)


def datasketch_name(ds: DatasketchResult) -> str:
    return f"datasketch MinHashLSH({DATASKETCH_THRESHOLD}), b={ds.bands} r={ds.rows}"


def setting_table(result: SettingResult, detailed: bool, labels: Labels) -> str:
    scores = result.scores
    rows = [score_cells("exact hash", scores[(None, None)])]
    rows += [score_cells(f"SimHash <= {k}", scores[(k, None)]) for k in HAMMING_KS]
    rows += [score_cells(f"MinHash LSH >= {t}", scores[(None, t)]) for t in THRESHOLDS]
    ks, ts = (DETAILED_KS, DETAILED_TS) if detailed else (COMPACT_KS, COMPACT_TS)
    rows += [score_cells(rule_name((k, t)), scores[(k, t)]) for k in ks for t in ts]
    if result.datasketch is not None:
        ds = result.datasketch
        rows.append(score_cells(f"{datasketch_name(ds)}: as returned", score(ds.returned, labels)))
        rows.append(
            score_cells(
                f"{datasketch_name(ds)}: verified >= {DATASKETCH_THRESHOLD}",
                score(ds.verified, labels),
            )
        )
    return table(SCORE_HEADERS, rows)


def summary_table(results: Sequence[SettingResult], labels: Labels) -> str:
    by_name = {r.name: r for r in results}
    default = by_name[setting_name(DEFAULT_SETTING)]
    former = by_name[setting_name(FORMER_SETTING)]
    rows = [
        score_cells(
            f"today's defaults: {default.name}, {rule_name(TODAY_RULE)}",
            default.scores[TODAY_RULE],
        ),
        score_cells(
            f"{former.name} (former default), {rule_name(FORMER_RULE)}",
            former.scores[FORMER_RULE],
        ),
    ]
    for result in results:
        rule, best = result.best()
        rows.append(score_cells(f"{result.name}: {rule_name(rule)}", best))
        free_rule, free = result.best(every_identical=False)
        if free_rule != rule:
            rows.append(score_cells(f"{result.name}: {rule_name(free_rule)} (*)", free))
    for result in results:
        if result.datasketch is not None:
            rows.append(
                score_cells(
                    f"{result.name}: {datasketch_name(result.datasketch)}, as returned",
                    score(result.datasketch.returned, labels),
                )
            )
    return table(SCORE_HEADERS, rows)


def example_rows(false_positives: Sequence[FalsePositive], corpus: Corpus) -> list[list[str]]:
    """A deterministic spread: the unlabelled pairs with the highest own-shingle Jaccard,
    the related (labelled) ones with the highest, then the lowest of all."""
    titles = dict(zip(corpus.ids.tolist(), corpus.titles, strict=True))
    unlabelled = sorted((f for f in false_positives if f.label is None), key=lambda f: -f.exact_j)
    related = sorted((f for f in false_positives if f.label is not None), key=lambda f: -f.exact_j)
    lowest = sorted(false_positives, key=lambda f: f.exact_j)
    chosen: list[FalsePositive] = []
    for group, count in ((unlabelled, 3), (related, 3), (lowest, 2)):
        chosen += [f for f in group if f not in chosen][:count]
    rows = []
    for f in chosen:
        a, b = key_ids(f.key)
        title_a, title_b = titles[a][:44], titles[b][:44]
        shown = f"{title_a}" if title_a == title_b else f"{title_a} / {title_b}"
        rows.append(
            [
                f"{a} / {b}",
                shown.replace("|", "/"),
                f.by,
                "< 0.5" if f.label is None else f"{f.label:.3f}",
                f"{f.exact_j:.3f}",
                f"{f.estimate:.3f}",
                str(f.hamming),
                "yes" if f.figures_only else "no",
            ]
        )
    return rows


def false_positive_section(
    title: str, name: str, rule: Rule, false_positives: Sequence[FalsePositive], corpus: Corpus
) -> str:
    k, t = rule
    total = len(false_positives)
    unlabelled = sum(f.label is None for f in false_positives)
    bar = t if t is not None else NEAR_J
    near_own = sum(f.exact_j >= bar for f in false_positives)
    figures = sum(f.figures_only for f in false_positives)
    simhash_only = [f for f in false_positives if f.by == "SimHash"]
    simhash_far = sum(f.exact_j < RELATED_J for f in simhash_only)
    noise = [f for f in false_positives if f.exact_j < bar and "MinHash" in f.by]
    labelled = [f for f in false_positives if f.label is not None]
    sentences = [
        f"**{title}** ({name}-grams, {rule_name(rule)}): {plural(total, 'false positive')}, "
        f"{total - unlabelled} labelled related (J in [0.5, 0.8)) and {unlabelled} "
        f"unlabelled (J < 0.5)."
    ]
    if near_own:
        sentences.append(
            f"{near_own} of them have an exact Jaccard of their own {name}-grams of at least "
            f"{bar}: near-duplicates by the setting's own measure, on which the word 5-gram "
            "labels disagree."
        )
    else:
        sentences.append(f"None has an exact Jaccard of its own {name}-grams of {bar} or more.")
    if labelled:
        gap = max(abs(f.exact_j - (f.label or 0.0)) for f in labelled)
        sentences.append(
            f"For the labelled ones, own {name}-gram Jaccard and label differ by at most {gap:.3f}."
        )
    sentences.append(
        f"{figures} of the {total} differ (almost) only in figures: with every number masked "
        f"their {name}-gram Jaccard is >= {FIGURES_ONLY_J}."
    )
    if noise:
        sentences.append(
            f"{len(noise)} passed on the MinHash estimate although their exact Jaccard is "
            f"below {bar} (by at most {max(f.estimate - f.exact_j for f in noise):.3f}): "
            "estimation noise."
        )
    if k is not None and simhash_only:
        sentences.append(
            f"{len(simhash_only)} were found by SimHash alone, {simhash_far} of which share "
            f"less than half of their {name}-grams."
        )
    elif k is not None:
        sentences.append("None was found by SimHash alone.")
    headers = ["ids", "titles", "found by", "label J", f"{name} J", "est J", "Ham", "figures"]
    return (
        paragraph(" ".join(sentences))
        + "\n\n"
        + table(headers, example_rows(false_positives, corpus), text_columns=3)
    )


def weighting_table(rows: Sequence[WeightingRow]) -> str:
    cells = [
        [
            row.setting,
            str(row.k),
            f"{row.core.found:,}",
            f"{row.core_unlabelled:,}",
            dec(row.core.precision),
            dec(row.core.recall),
            f"{row.former.found:,}",
            f"{row.former_unlabelled:,}",
            dec(row.former.precision),
            dec(row.former.recall),
        ]
        for row in rows
    ]
    headers = [
        "setting",
        "k",
        "distinct (core): found",
        "distinct: J < 0.5",
        "distinct: precision",
        "distinct: recall",
        "occurrences (former): found",
        "occurrences: J < 0.5",
        "occurrences: precision",
        "occurrences: recall",
    ]
    return table(headers, cells)


def join_names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True, slots=True)
class Report:
    results: list[SettingResult]  # in SETTINGS order
    ranked: list[SettingResult]  # best first (rank_key)
    detailed: set[str]
    corpus: Corpus
    labels: Labels
    today: list[FalsePositive]  # false positives of today's defaults
    former: list[FalsePositive]  # false positives of the former defaults
    chosen: list[FalsePositive]  # false positives of the best rule measured
    today_identical: list[IdenticalMiss]
    former_identical: list[IdenticalMiss]
    today_misses: Misses
    punctuation: tuple[int, int]  # for today's default setting, see punctuation_only
    label_agreement: int  # labelled pairs whose default-shingle Jaccard is the label's
    weighting: list[WeightingRow]

    def setting(self, setting: tuple[ShingleUnit, int]) -> SettingResult:
        return next(r for r in self.results if r.name == setting_name(setting))

    @property
    def chosen_is_default(self) -> bool:
        """Is the best rule measured today's defaults?"""
        best = self.ranked[0]
        return best.name == setting_name(DEFAULT_SETTING) and best.best()[0] == TODAY_RULE


def method_items(report: Report) -> list[str]:
    corpus, labels = report.corpus, report.labels
    settings = ", ".join(r.name for r in report.results)
    skipped = ", ".join(str(i) for i in corpus.skipped) or "none"
    return [
        f"""**Data.** Reuters-21578 (`../shared/data/reuters21578/reuters21578.jsonl`),
        {corpus.total:,} stories; the text of a story is its title, a newline and its body,
        normalised by `app.core.text.normalize`. Stories left out for an empty text:
        {len(corpus.skipped)} (id {skipped}; in no labelled pair).""",
        """**Replay.** Stories in `date` order (ties by id, `devkit/harness.load_reuters`).
        For each story: search the indexes for near-duplicates among the earlier stories,
        then insert it (single-row inserts, a merge whenever an index asks for one). A
        found pair is (earlier story, current story) returned by a method.""",
        f"""**Fingerprints.** Per shingle setting ({settings}), every story once:
        `fingerprint_normalized` on batches of {BATCH_SIZE}, `FingerprintParams(unit, size,
        num_perm={NUM_PERM}, seed={SEED})`. Word 4 and word 5 were added to the six asked
        for because precision and recall both rise along word 1, 2, 3; thresholds 0.85 and
        0.9 because a character n-gram Jaccard runs well above the labels' word 5-gram
        Jaccard of the same pair.""",
        f"""**Methods.** exact: `ExactIndex` (equal xxh3-128 of the normalised text).
        SimHash <= k: one `HammingIndex(max_distance={max(HAMMING_KS)})` whose matches are
        filtered by distance, exact since it returns every fingerprint within
        {max(HAMMING_KS)} bits. MinHash LSH >= t: one `LSHIndex(threshold=t,
        num_perm={NUM_PERM})` per threshold, so each threshold has its own banding; every
        match is verified (estimate >= t). Combined rows apply the service's rule:
        near-duplicate if the exact hash is equal OR Hamming <= k OR estimated Jaccard >= t,
        i.e. the union of the pairs the three indexes found.""",
        f"""**datasketch.** `MinHashLSH(threshold={DATASKETCH_THRESHOLD},
        num_perm={NUM_PERM})` with `MinHash(num_perm={NUM_PERM})` (seed
        {DATASKETCH_SEED}), `update_batch` on the setting's distinct shingles: for character
        n-grams the UTF-8 n-gram strings of the normalised text, for word n-grams the
        core's 64-bit shingle hashes (8 bytes each, so both see the same token n-grams),
        replayed the same way (query, then insert). "As returned" is what `query` gives
        (band collisions, unverified), as a datasketch user gets it; "verified" keeps the
        pairs whose `MinHash.jaccard` is >= {DATASKETCH_THRESHOLD}.""",
        f"""**Labels.** `reuters21578.near_dup_pairs.tsv`: {len(labels.labelled)} pairs
        with a word 5-gram Jaccard J >= {RELATED_J} ({len(labels.identical)} with J = 1.0,
        {len(labels.near) - len(labels.identical)} in [0.8, 1), {len(labels.related)} in
        [0.5, 0.8)). Positives: the {len(labels.near)} pairs with J >= {NEAR_J}.
        {len(labels.same_text)} of the J = 1.0 pairs have equal normalised texts; the other
        {len(labels.identical) - len(labels.same_text)} differ in punctuation or a few
        characters.""",
        """**Scores.** precision = found pairs labelled J >= 0.8 / found pairs; lenient
        precision = found pairs labelled J >= 0.5 / found pairs (a related pair is not held
        against a method, since the labels are word 5-grams and most settings' shingles
        differ);
        recall J>=0.8 = labelled J >= 0.8 pairs found / all of them, likewise for J = 1.0
        (pairs found in brackets) and for J in [0.5, 0.8); F1 from precision and recall
        J>=0.8. A found pair missing from the label file has J < 0.5.""",
    ]


def defaults_items(report: Report) -> list[str]:
    labels = report.labels
    default, former = report.setting(DEFAULT_SETTING), report.setting(FORMER_SETTING)
    chosen, runner_up = report.ranked[0], report.ranked[1]
    chosen_rule, best = chosen.best()
    runner_rule, runner = runner_up.best()
    k, t = TODAY_RULE
    today = default.scores[TODAY_RULE]
    datasketch = [r for r in report.results if r.datasketch is not None]
    ds_scores = {r.name: score(r.datasketch.returned, labels) for r in datasketch if r.datasketch}
    met = (
        today.f1 >= F1_TARGET
        and today.all_identical
        and all(today.f1 > s.f1 for s in ds_scores.values())
    )
    ds_text = "; ".join(f"{name}-grams {dec(s.f1)}" for name, s in ds_scores.items())
    differing, equal_sets = report.punctuation
    drop = ", since word tokens drop punctuation" if default.unit == "word" else ""
    config = (
        f'`CollectionConfig()` in app/collection_config.py: shingle unit "{default.unit}", '
        f"size {default.size}, SimHash max_distance {k}, MinHash threshold {t}"
    )
    measured = f"""On this replay the rule finds {today.found} pairs: precision
        {dec(today.precision)}, lenient precision {dec(today.lenient_precision)}, recall
        {dec(today.recall)}, F1 {dec(today.f1)}, with {today.identical_found} of
        {today.identical_total} J = 1.0 pairs (the {len(labels.same_text)} with equal
        normalised texts by the exact hash; of the {differing} that differ in punctuation or
        a few characters, {equal_sets} have equal {default.name}-gram sets{drop})."""
    target = f"""The service target (F1 >= {F1_TARGET}, every identical pair, F1 above
        datasketch's) is {"met" if met else "NOT met"}: datasketch
        MinHashLSH({DATASKETCH_THRESHOLD}), as returned: {ds_text}."""
    if report.chosen_is_default:
        defaults = f"""**Defaults: the service uses {default.name}-grams, k = {k}, t = {t}
            ({config}) because this rule has the best F1 of all settings and rules
            measured that find every J = 1.0 pair.** {measured} The best other setting:
            {short_rule(runner_up.name, runner_rule)}, F1 {dec(runner.f1)}. {target}"""
    else:
        defaults = f"""**Defaults: the service uses {default.name}-grams, k = {k}, t = {t}
            ({config}).** {measured} The best rule measured that finds every J = 1.0 pair
            is however {short_rule(chosen.name, chosen_rule)}, F1 {dec(best.f1)}: the
            defaults no longer match this evaluation. {target}"""

    former_rule_score = former.scores[FORMER_RULE]
    former_best_rule, former_best = former.best()
    free_rule, free = former.best(every_identical=False)
    miss_text = "; ".join(
        f"'{m.title}' ({short_pair(m.key)}), {m.own_j:.3f} of shared {former.name}-grams, "
        f"{m.hamming} bits, estimate {m.estimate:.3f}"
        for m in report.former_identical
    )
    former_fp = report.former
    fk, ft = FORMER_RULE
    near_own = sum(f.exact_j >= ft for f in former_fp)
    figures = sum(f.figures_only for f in former_fp)
    noise = sum(f.exact_j < ft and "MinHash" in f.by for f in former_fp)
    simhash_alone = sum(f.by == "SimHash" for f in former_fp)
    lsh_rule, lsh_best = max(
        (((None, x), former.scores[(None, x)]) for x in THRESHOLDS),
        key=lambda item: (item[1].f1, item[1].recall),
    )
    contrast = ""
    if former.unit == "char" and default.unit == "word":
        contrast = f"""A changed word or number costs a character n-gram set only the few
            n-grams around it, so same-template stories with other figures and re-edited
            stories keep most of their character {former.size}-grams; {default.size} whole
            tokens per shingle make a changed figure cost as much as in the labels'
            measure, and punctuation costs nothing."""
    why_not = f"""**Why not {former.name}-grams, the former default (k = {fk}, t = {ft}).**
        F1 {dec(former_rule_score.f1)}: precision {dec(former_rule_score.precision)}, recall
        {dec(former_rule_score.recall)}, {former_rule_score.identical_found} of
        {former_rule_score.identical_total} J = 1.0
        pairs{" (missed: " + miss_text + ")" if miss_text else ""}. The best
        {former.name}-gram rule, {rule_name(free_rule)}, reaches F1 {dec(free.f1)}
        (precision {dec(free.precision)}, recall {dec(free.recall)},
        {free.identical_found} J = 1.0 pairs); finding every J = 1.0 pair takes
        {rule_name(former_best_rule)}, F1 {dec(former_best.f1)}; without SimHash, the best
        is {rule_name(lsh_rule)}, F1 {dec(lsh_best.f1)}. The loss is precision: {near_own}
        of its {len(former_fp)} false positives share at least {ft} of their
        {former.name}-grams (near-duplicates by its own measure), {figures} differ only in
        figures; {noise} are MinHash estimation noise and {simhash_alone} were found by
        SimHash alone. {contrast}"""

    scores_k = {other: default.scores[(other, t)] for other in HAMMING_KS}
    ks_text = ", ".join(
        f"k = {other}: F1 {dec(s.f1)} ({s.true_positives} TP, {s.false_positives} FP)"
        for other, s in scores_k.items()
    )
    best_k = max(scores_k, key=lambda other: (scores_k[other].f1, scores_k[other].recall, -other))
    lsh_only = default.scores[(None, t)]
    if best_k == k:
        k_choice = (
            f"The smallest k has the best F1 and keeps the Hamming index at {k + 1} tables."
            if k == min(HAMMING_KS)
            else f"k = {k} has the best F1."
        )
    else:
        k_choice = f"k = {best_k} would have a higher F1, {dec(scores_k[best_k].f1)}."
    simhash_role = (
        "SimHash earns its place in the rule as a cheap exact search, not for accuracy here."
        if today.found == lsh_only.found
        else ""
    )
    k_text = f"""**k = {k}.** With {default.name}-grams and t = {t}, SimHash adds
        {plural(today.found - lsh_only.found, "pair")} to what MinHash finds at k = {k}
        (MinHash alone: F1 {dec(lsh_only.f1)}). Over k: {ks_text}. {k_choice}
        {simhash_role}"""

    m = report.today_misses
    lower_t = THRESHOLDS[THRESHOLDS.index(t) - 1]
    lower = default.scores[(k, lower_t)]
    higher_text = ", ".join(f"{dec(default.scores[(k, x)].f1)} at {x}" for x in THRESHOLDS if x > t)
    t_text = f"""**t = {t}.** Lower thresholds add related pairs and lose precision (at
        {lower_t}: recall on [0.5, 0.8) {dec(lower.recall_related)} against
        {dec(today.recall_related)}, precision {dec(lower.precision)}, F1 {dec(lower.f1)});
        higher ones lose recall (F1 {higher_text}). The rule misses {m.missed} J >= 0.8
        pairs, the highest labelled {m.highest_label:.3f}: {m.below} estimated below {t}
        and {m.banding} estimated at or above it but never made candidates by the banding
        (b = {m.bands}, r = {m.rows}, which makes a pair of Jaccard {t} a candidate with
        probability {m.probability_at_threshold:.2f})."""

    agreement, labelled = report.label_agreement, len(labels.labelled)
    same_rule = "is the labelling rule itself" if agreement == labelled else "is close to"
    name = default.name.capitalize()
    caveat = f"""**Caveat: the labels are word 5-gram Jaccard.** {name}-grams at t = {t}
        {same_rule}: the exact Jaccard of the service's {default.name}-grams equals the
        labelled J (to its four decimals) for {agreement} of the {labelled} labelled pairs.
        So this F1 is largely agreement by construction: the errors left are MinHash noise
        around {t} (see the false positives above). The best other setting,
        {short_rule(runner_up.name, runner_rule)}, is {dec(today.f1 - runner.f1)} behind
        ({runner.true_positives} TP and {runner.false_positives} FP against
        {today.true_positives} and {today.false_positives}). The character settings'
        higher recall on [0.5, 0.8) and lenient precision show what they add: re-edited
        stories a reader would call the same story, together with same-template stories
        with other figures that a reader would not. For Chinese and other scripts written
        without spaces the word unit makes each character a token, so word n-grams there
        are character n-grams of the same n; this corpus has no such text."""
    return [defaults, why_not, k_text, t_text, caveat]


def short_pair(key: int) -> str:
    a, b = key_ids(key)
    return f"{a} / {b}"


def weighting_text(report: Report) -> str:
    titles = dict(zip(report.corpus.ids.tolist(), report.corpus.titles, strict=True))
    former_name = setting_name(FORMER_SETTING)
    example = ""
    shown = next(
        (r for r in report.weighting if r.setting == former_name and r.example is not None),
        next((r for r in report.weighting if r.example is not None), None),
    )
    if shown is not None and shown.example is not None:
        e = shown.example
        a, b = key_ids(e.key)
        example = (
            f" For example '{titles[a]}' and '{titles[b]}' ({a} / {b}) share "
            f"{e.own_j:.3f} of their {shown.setting}-grams but are "
            f"{plural(e.hamming, 'bit')} apart with the former weighting "
            f"({plural(e.core_hamming, 'bit')} with the core's)."
        )
    at_3 = [r for r in report.weighting if r.k == 3]
    today = next((r for r in at_3 if r.setting == setting_name(DEFAULT_SETTING)), None)
    today_text = ""
    if today is not None:
        today_text = f""" With today's {today.setting}-grams the weighting matters little at
            k = 3: {today.former.found} pairs found with the former, {today.core.found}
            with the core's."""
    effect = "; ".join(
        f"{r.setting}: {r.former_unlabelled} -> {r.core_unlabelled} pairs with J < 0.5, "
        f"recall {dec(r.former.recall)} -> {dec(r.core.recall)}"
        for r in at_3
    )
    return f"""**SimHash weighting (app/core/_kernels.py, `simhash64`).** The core's SimHash
        gives every distinct shingle weight 1. Before the defaults changed it gave every
        shingle occurrence weight 1, so a shingle repeated many times (runs of dots in
        tables, "the" under word 1-grams) pulled the bits of long texts the same
        way.{example} The table compares the two: the core's SimHash as replayed above, and
        the former one re-implemented here (weight 1 per occurrence, otherwise the same),
        replayed the same way; "J < 0.5" counts found pairs missing from the label file.
        At k = 3, from the former weighting to the core's: {effect}.{today_text}"""


def render(report: Report) -> str:
    results = report.results
    default = report.setting(DEFAULT_SETTING)
    former = report.setting(FORMER_SETTING)
    chosen = report.ranked[0]
    detailed_names = join_names([r.name for r in results if r.name in report.detailed])
    summary_intro = f"""Today's defaults ({default.name}-grams, k = {TODAY_RULE[0]}, t =
        {TODAY_RULE[1]}: app/collection_config.py) and the former defaults
        ({former.name}-grams, k = {FORMER_RULE[0]}, t = {FORMER_RULE[1]}), then for each
        setting the rule with the best F1 among those with k in {HAMMING_KS} and t in
        {THRESHOLDS} that find every J = 1.0 pair (ties: higher recall, then smaller k),
        and, marked (*), the best rule when some J = 1.0 pair may be missed, if it differs;
        then datasketch. The per-setting tables show each method alone and combined rules:
        every k in (none, 3, 4, 6, 8) with t in {DETAILED_TS} for {detailed_names}, a few
        for the others."""
    parts = [
        "# Near-duplicate detection on Reuters-21578: a date-ordered replay",
        "Generated by `bench/reuters_replay.py` (deterministic); do not edit by hand.",
        "## Method",
        "\n".join(paragraph(item, bullet=True) for item in method_items(report)),
        "## Summary",
        paragraph(summary_intro),
        summary_table(results, report.labels),
        "## Per setting",
    ]
    for result in results:
        parts.append(f"### {result.name}-grams")
        parts.append(setting_table(result, result.name in report.detailed, report.labels))
    parts.append("## False positives")
    parts.append(
        paragraph(
            f"""What these rules find that the labels do not call near-duplicates (J <
            {NEAR_J}). "label J": the labelled word 5-gram Jaccard ("< 0.5": not in the
            file); then the exact Jaccard of the setting's own shingles, the MinHash
            estimate, the SimHash distance, and "figures": yes when the two texts' shingle
            Jaccard is >= {FIGURES_ONLY_J} once every number (digits, number words) is
            masked. Examples: the unlabelled pairs with the highest own Jaccard, the
            related ones with the highest, and the lowest of all."""
        )
    )
    today_title = "Today's defaults"
    if report.chosen_is_default:
        today_title += ", the best rule measured"
    parts.append(
        false_positive_section(today_title, default.name, TODAY_RULE, report.today, report.corpus)
    )
    parts.append(
        false_positive_section(
            "Former defaults", former.name, FORMER_RULE, report.former, report.corpus
        )
    )
    if not report.chosen_is_default:
        parts.append(
            false_positive_section(
                "Best rule measured", chosen.name, chosen.best()[0], report.chosen, report.corpus
            )
        )
    parts.append("## Defaults")
    parts.append("\n\n".join(paragraph(item) for item in defaults_items(report)))
    parts.append("## Notes on the core")
    parts.append(paragraph(weighting_text(report)))
    parts.append(weighting_table(report.weighting))
    parts.append(
        paragraph(
            """tests/test_reuters_replay.py replays the corpus with today's defaults
            through the core indexes and checks F1 and that every labelled identical pair
            is found."""
        )
    )
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------- main


def log(message: str, start: float) -> None:
    print(f"[{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True)


def measure(settings: Sequence[tuple[ShingleUnit, int]] = SETTINGS) -> Report | None:
    start = time.perf_counter()
    corpus = load_corpus()
    if corpus is None:
        return None
    labels = load_labels(corpus)
    log(f"{len(corpus.ids):,} stories, {len(labels.labelled)} labelled pairs", start)
    results: list[SettingResult] = []
    for unit, size in settings:
        result = measure_setting(unit, size, corpus, labels)
        rule, best = result.best()
        log(f"{result.name}: best {rule_name(rule)}, F1 {best.f1:.3f}", start)
        results.append(result)

    default_name, former_name = setting_name(DEFAULT_SETTING), setting_name(FORMER_SETTING)
    ranked_names = [r.name for r in sorted(results, key=rank_key, reverse=True)]
    others = [name for name in ranked_names if name not in (default_name, former_name)]
    detailed = {default_name, former_name, *others[:DETAILED_OTHERS]}
    for index, result in enumerate(results):
        if result.name in (default_name, former_name, ranked_names[0]):
            ds = datasketch_replay(corpus, result.params)
            results[index] = SettingResult(
                result.unit, result.size, result.found, result.scores, result.fingerprints, ds
            )
            log(f"{result.name}: datasketch F1 {score(ds.returned, labels).f1:.3f}", start)

    by_name = {r.name: r for r in results}
    default, former = by_name[default_name], by_name[former_name]
    chosen = by_name[ranked_names[0]]
    chosen_rule = chosen.best()[0]
    weighted_names = dict.fromkeys([former_name, "word 1", default_name, chosen.name])
    report = Report(
        results=results,
        ranked=[by_name[name] for name in ranked_names],
        detailed=detailed,
        corpus=corpus,
        labels=labels,
        today=inspect_false_positives(default, TODAY_RULE, corpus, labels),
        former=inspect_false_positives(former, FORMER_RULE, corpus, labels),
        chosen=inspect_false_positives(chosen, chosen_rule, corpus, labels),
        today_identical=identical_misses(default, TODAY_RULE, corpus, labels),
        former_identical=identical_misses(former, FORMER_RULE, corpus, labels),
        today_misses=misses(default, TODAY_RULE, corpus, labels),
        punctuation=punctuation_only(default, corpus, labels),
        label_agreement=label_agreement(default, corpus, labels),
        weighting=simhash_weighting(
            [by_name[name] for name in weighted_names if name in by_name], corpus, labels
        ),
    )
    log("inspection done", start)
    return report


def run(settings: Sequence[tuple[ShingleUnit, int]] = SETTINGS) -> str | None:
    report = measure(settings)
    return None if report is None else render(report)


def pin_to_last_core() -> int:
    """Pin to the last CPU this process may use: one core, and not the one other
    benchmarks pin themselves to (devkit/harness.pin_to_one_core takes the first)."""
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def main() -> None:
    pin_to_last_core()
    report = run()
    if report is None:
        sys.exit(f"data not found: {PAIRS_PATH.parent}")
    OUTPUT_PATH.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
