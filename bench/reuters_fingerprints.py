"""How well SimHash and MinHash separate Reuters-21578 near-duplicates, per shingle setting.

Run ``.venv/bin/python -m bench.reuters_fingerprints``: it fingerprints every story under
each shingle setting, compares the labelled near-duplicate pairs with seeded random pairs
of unrelated stories, writes docs/fingerprints.md and prints it. Deterministic (fixed
seed, no timings in the report); under a minute on one core.
"""

from __future__ import annotations

import csv
import itertools
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.fingerprint import FingerprintParams, ShingleUnit, fingerprint, shingle_hashes
from app.core.text import normalize
from devkit.harness import load_reuters, paragraph, reuters_text

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT.parent / "shared/data/reuters21578"
PAIRS_PATH = DATA_DIR / "reuters21578.near_dup_pairs.tsv"
OUTPUT_PATH = REPO_ROOT / "docs" / "fingerprints.md"

SEED = 21578
RANDOM_PAIRS = 20_000
BATCH_SIZE = 256
NUM_PERM = 128
SETTINGS: tuple[tuple[ShingleUnit, int], ...] = (
    ("char", 3),
    ("char", 4),
    ("char", 5),
    ("char", 7),
    ("word", 1),
    ("word", 2),
    ("word", 3),
)
DEFAULT_SETTING: tuple[ShingleUnit, int] = ("char", 5)  # FingerprintParams()
# Bands of the labelled (word 5-gram) Jaccard: name, lower bound, upper bound (exclusive;
# the first band is exactly 1).
BANDS: tuple[tuple[str, float, float], ...] = (
    ("J = 1.0", 1.0, 1.0),
    ("J in [0.9, 1)", 0.9, 1.0),
    ("J in [0.8, 0.9)", 0.8, 0.9),
    ("J in [0.7, 0.8)", 0.7, 0.8),
    ("J in [0.6, 0.7)", 0.6, 0.7),
    ("J in [0.5, 0.6)", 0.5, 0.6),
)
NEAR_DUP_J = 0.8  # labelled pairs at or above this are the near-duplicates to find
HAMMING_KS = (3, 6, 8, 10, 12)
SUMMARY_KS = (3, 6, 8, 10)
ESTIMATE_THRESHOLDS = (0.5, 0.6, 0.7, 0.8)
PERCENTILES = (0.0, 1.0, 5.0, 50.0, 90.0, 100.0)  # min, p1, p5, median, p90, max
TIE_PAIRS = 2  # recalls this many pairs apart or closer are called a tie
# Every pair is estimated with the same hash seed, so their errors are correlated: the
# mean error is re-measured under these seeds too, to tell a bias from one seed's luck.
ERROR_SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True, slots=True)
class Corpus:
    """The stories with a non-empty text, in id order."""

    total: int  # stories in the file, including any left out
    ids: list[int]
    titles: list[str]
    raw: list[str]
    normalized: list[str]


@dataclass(frozen=True, slots=True)
class Pairs:
    """Pairs of stories as row indices into the corpus, with their labelled Jaccard."""

    left: np.ndarray  # int64[P]
    right: np.ndarray  # int64[P]
    label: np.ndarray  # float64[P]; NaN for unrelated pairs


@dataclass(frozen=True, slots=True)
class PairScores:
    """Per-pair results of one shingle setting."""

    hamming: np.ndarray  # int64[P]: SimHash Hamming distance
    estimate: np.ndarray  # float64[P]: MinHash Jaccard estimate
    exact: np.ndarray  # float64[P]: exact Jaccard of the same shingles


@dataclass(frozen=True, slots=True)
class SettingResult:
    """The labelled and unrelated pairs scored under one shingle setting."""

    unit: ShingleUnit
    size: int
    labelled: PairScores
    unrelated: PairScores
    near: np.ndarray  # bool[labelled]: labelled Jaccard >= NEAR_DUP_J
    unrelated_error_by_seed: dict[int, float]  # mean estimate error of the unrelated pairs

    @property
    def name(self) -> str:
        return f"{self.unit} {self.size}"

    @property
    def near_count(self) -> int:
        return int(self.near.sum())

    def hits_at(self, k: int) -> int:
        """J >= 0.8 pairs whose SimHashes are at most k bits apart."""
        return int((self.labelled.hamming[self.near] <= k).sum())

    def recall_at(self, k: int) -> float:
        return self.hits_at(k) / self.near_count

    def false_at(self, k: int) -> int:
        """Unrelated pairs whose SimHashes are at most k bits apart."""
        return int((self.unrelated.hamming <= k).sum())

    @property
    def clean_k(self) -> int:
        """The largest Hamming threshold that no unrelated pair falls within."""
        return int(self.unrelated.hamming.min()) - 1

    def estimate_hits(self, threshold: float) -> int:
        return int((self.labelled.estimate[self.near] >= threshold).sum())

    def estimate_false(self, threshold: float) -> int:
        return int((self.unrelated.estimate >= threshold).sum())

    @property
    def max_unrelated_estimate(self) -> float:
        return float(self.unrelated.estimate.max())

    @property
    def hits_above_unrelated(self) -> int:
        """J >= 0.8 pairs estimated strictly higher than every unrelated pair."""
        return int((self.labelled.estimate[self.near] > self.max_unrelated_estimate).sum())


# ---------------------------------------------------------------------------- data


def load_corpus() -> Corpus | None:
    """Every story whose normalised text is not empty, or None when the data is absent."""
    stories = load_reuters()
    if stories is None or not PAIRS_PATH.is_file():
        return None
    stories.sort(key=lambda story: int(story["id"]))
    corpus = Corpus(total=len(stories), ids=[], titles=[], raw=[], normalized=[])
    for story in stories:
        text = reuters_text(story)
        clean = normalize(text)
        if clean:
            corpus.ids.append(int(story["id"]))
            corpus.titles.append(str(story.get("title") or ""))
            corpus.raw.append(text)
            corpus.normalized.append(clean)
    return corpus


def load_labelled_pairs(corpus: Corpus) -> Pairs:
    row_of = {story_id: row for row, story_id in enumerate(corpus.ids)}
    left: list[int] = []
    right: list[int] = []
    label: list[float] = []
    with PAIRS_PATH.open(encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle, delimiter="\t"):
            left.append(row_of[int(record["id_a"])])
            right.append(row_of[int(record["id_b"])])
            label.append(float(record["jaccard"]))
    return Pairs(np.array(left), np.array(right), np.array(label))


def sample_unrelated_pairs(count: int, stories: int, labelled: Pairs, seed: int) -> Pairs:
    """``count`` distinct pairs of distinct stories, uniformly at random, none labelled."""
    rng = random.Random(seed)
    excluded = {
        (min(a, b), max(a, b))
        for a, b in zip(labelled.left.tolist(), labelled.right.tolist(), strict=True)
    }
    chosen: dict[tuple[int, int], None] = {}  # insertion-ordered set
    while len(chosen) < count:
        a, b = rng.sample(range(stories), 2)
        key = (min(a, b), max(a, b))
        if key not in excluded:
            chosen[key] = None
    left, right = zip(*chosen, strict=True)
    return Pairs(np.array(left), np.array(right), np.full(count, np.nan))


# ---------------------------------------------------------------------------- measurement


def shingle_set(normalized_text: str, params: FingerprintParams) -> set[str] | set[int]:
    """The distinct shingles fingerprinting uses, for an exact Jaccard.

    Character n-grams as strings (a text shorter than n is one shingle, as in the core);
    word n-grams as their 64-bit hashes, which stand for the token tuples one to one.
    """
    if params.unit == "char":
        n = params.size
        if len(normalized_text) < n:
            return {normalized_text}
        return {normalized_text[i : i + n] for i in range(len(normalized_text) - n + 1)}
    hashes: list[int] = shingle_hashes(normalized_text, params).tolist()
    return set(hashes)


def exact_jaccard(pairs: Pairs, normalized: Sequence[str], params: FingerprintParams) -> np.ndarray:
    """Exact Jaccard of each pair's shingle sets (sets built per pair: bounded memory)."""
    values = np.empty(len(pairs.left), dtype=np.float64)
    for index, (a, b) in enumerate(zip(pairs.left.tolist(), pairs.right.tolist(), strict=True)):
        set_a = shingle_set(normalized[a], params)
        set_b = shingle_set(normalized[b], params)
        values[index] = len(set_a & set_b) / len(set_a | set_b)
    return values


def mean_error(scores: PairScores) -> float:
    """Mean of (MinHash estimate - exact Jaccard) over the pairs."""
    return float(np.mean(scores.estimate - scores.exact))


def score_pairs(
    simhash: np.ndarray, minhash: np.ndarray, pairs: Pairs, exact: np.ndarray
) -> PairScores:
    # Row by row, the same as app.core.fingerprint.hamming_distance and jaccard_estimate.
    hamming = np.bitwise_count(simhash[pairs.left] ^ simhash[pairs.right]).astype(np.int64)
    estimate = np.mean(minhash[pairs.left] == minhash[pairs.right], axis=1)
    return PairScores(hamming, estimate, exact)


def fingerprint_corpus(corpus: Corpus, params: FingerprintParams) -> tuple[np.ndarray, np.ndarray]:
    """SimHash (uint64[N]) and MinHash (uint32[N, K]) of every story, in batches."""
    simhash = np.empty(len(corpus.raw), dtype=np.uint64)
    minhash = np.empty((len(corpus.raw), params.num_perm), dtype=np.uint32)
    for begin in range(0, len(corpus.raw), BATCH_SIZE):
        batch = fingerprint(corpus.raw[begin : begin + BATCH_SIZE], params)
        simhash[begin : begin + len(batch)] = batch.simhash
        minhash[begin : begin + len(batch)] = batch.minhash
    return simhash, minhash


def measure_setting(
    unit: ShingleUnit, size: int, corpus: Corpus, labelled: Pairs, unrelated: Pairs
) -> SettingResult:
    params = FingerprintParams(unit=unit, size=size, num_perm=NUM_PERM, seed=0)
    simhash, minhash = fingerprint_corpus(corpus, params)
    unrelated_scores = score_pairs(
        simhash, minhash, unrelated, exact_jaccard(unrelated, corpus.normalized, params)
    )
    # The exact Jaccard does not depend on the seed; only the estimates are redone.
    error_by_seed = {0: mean_error(unrelated_scores)}
    for seed in ERROR_SEEDS:
        if seed not in error_by_seed:
            reseeded = FingerprintParams(unit=unit, size=size, num_perm=NUM_PERM, seed=seed)
            other_simhash, other_minhash = fingerprint_corpus(corpus, reseeded)
            scores = score_pairs(other_simhash, other_minhash, unrelated, unrelated_scores.exact)
            error_by_seed[seed] = mean_error(scores)
    return SettingResult(
        unit=unit,
        size=size,
        labelled=score_pairs(
            simhash, minhash, labelled, exact_jaccard(labelled, corpus.normalized, params)
        ),
        unrelated=unrelated_scores,
        near=labelled.label >= NEAR_DUP_J,
        unrelated_error_by_seed=error_by_seed,
    )


# ---------------------------------------------------------------------------- reporting


def band_mask(label: np.ndarray, low: float, high: float) -> np.ndarray:
    mask: np.ndarray = label == 1.0 if low == high else (label >= low) & (label < high)
    return mask


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, first column left-aligned and the others right-aligned."""
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * widths[0], *("-" * (width - 1) + ":" for width in widths[1:])]
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |", *map(line, rows)])


def pct(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def fp_rate(count: int) -> str:
    """A false-positive count as a share of the unrelated pairs (1 pair = 0.005%)."""
    return f"{100 * count / RANDOM_PAIRS:.3f}%"


def signed(value: float) -> str:
    return f"{value:+.4f}"


def binomial_rmse(exact: np.ndarray) -> float:
    """The RMSE of an estimator with the variance of K independent samples: J(1-J)/K."""
    return float(np.sqrt(np.mean(exact * (1 - exact)) / NUM_PERM))


def score_row(name: str, scores: PairScores, mask: np.ndarray) -> list[str]:
    hamming = scores.hamming[mask]
    error = scores.estimate[mask] - scores.exact[mask]
    quantiles = np.percentile(hamming, PERCENTILES, method="inverted_cdf")
    return [
        name,
        f"{int(mask.sum()):,}",
        *(str(int(q)) for q in quantiles),
        f"{scores.exact[mask].mean():.3f}",
        f"{scores.estimate[mask].mean():.3f}",
        signed(float(error.mean())),
        f"{np.sqrt(np.mean(error**2)):.4f}",
        f"{binomial_rmse(scores.exact[mask]):.4f}",
    ]


def setting_section(result: SettingResult, labelled: Pairs) -> str:
    every = np.ones(len(result.unrelated.hamming), dtype=bool)
    rows = [
        score_row(name, result.labelled, band_mask(labelled.label, low, high))
        for name, low, high in BANDS
    ]
    rows.append(score_row("unrelated", result.unrelated, every))
    bands = table(
        [
            "pairs",
            "n",
            "Ham min",
            "p1",
            "p5",
            "median",
            "p90",
            "max",
            "exact J",
            "est J",
            "est - exact",
            "RMSE",
            "binomial RMSE",
        ],
        rows,
    )
    near_count = result.near_count
    tests = [
        [
            f"Hamming <= {k}",
            f"{pct(result.recall_at(k))} ({result.hits_at(k)})",
            f"{fp_rate(result.false_at(k))} ({result.false_at(k)})",
        ]
        for k in HAMMING_KS
    ]
    tests += [
        [
            f"estimate >= {t}",
            f"{pct(result.estimate_hits(t) / near_count)} ({result.estimate_hits(t)})",
            f"{fp_rate(result.estimate_false(t))} ({result.estimate_false(t)})",
        ]
        for t in ESTIMATE_THRESHOLDS
    ]
    passing = table(
        ["test", f"J >= {NEAR_DUP_J} pairs passing (of {near_count})", "unrelated passing"],
        tests,
    )
    return f"### {result.name}-grams\n\n{bands}\n\n{passing}\n"


def summary_table(results: Sequence[SettingResult]) -> str:
    rows = [
        [
            result.name,
            *(pct(result.recall_at(k)) for k in SUMMARY_KS),
            *(fp_rate(result.false_at(k)) for k in SUMMARY_KS),
            f"{pct(result.recall_at(result.clean_k))} (k={result.clean_k})",
            f"{result.max_unrelated_estimate:.3f}",
            pct(result.hits_above_unrelated / result.near_count),
            signed(mean_error(result.labelled)),
            signed(mean_error(result.unrelated)),
            f"{signed(min(result.unrelated_error_by_seed.values()))} to "
            f"{signed(max(result.unrelated_error_by_seed.values()))}",
        ]
        for result in results
    ]
    headers = [
        "setting",
        *(f"recall <={k}" for k in SUMMARY_KS),
        *(f"FP <={k}" for k in SUMMARY_KS),
        "recall at clean k",
        "max unrel. est",
        "recall above",
        "est err labelled",
        "est err unrel.",
        f"unrel., seeds {ERROR_SEEDS[0]}-{ERROR_SEEDS[-1]}",
    ]
    return table(headers, rows)


def join_names(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def pair_label(corpus: Corpus, pairs: Pairs, index: int) -> str:
    a, b = int(pairs.left[index]), int(pairs.right[index])
    titles = [corpus.titles[a].strip(), corpus.titles[b].strip()]
    named = f"'{titles[0]}'" if titles[0] == titles[1] else f"'{titles[0]}' and '{titles[1]}'"
    return f"stories {corpus.ids[a]} and {corpus.ids[b]} ({named})"


def simhash_findings(results: Sequence[SettingResult], corpus: Corpus, unrelated: Pairs) -> str:
    near_count = results[0].near_count
    sentences: list[str] = []

    # Recall at a strict threshold.
    strict = SUMMARY_KS[0]
    dirty = [r.name for r in results if r.false_at(strict)]
    by_strict = sorted(results, key=lambda r: -r.hits_at(strict))
    family_monotone = all(
        all(
            earlier.hits_at(strict) >= later.hits_at(strict)
            for earlier, later in itertools.pairwise(family)
        )
        for family in ([r for r in results if r.unit == unit] for unit in ("char", "word"))
    )
    reach = (
        f"no unrelated pair is within {strict} bits under any setting"
        if not dirty
        else f"unrelated pairs come within {strict} bits under {join_names(dirty)}"
    )
    trend = ", and within each unit it falls as the shingles get longer" if family_monotone else ""
    sentences.append(
        f"At k = {strict} {reach}; recall of the J >= {NEAR_DUP_J} pairs is highest with "
        f"{by_strict[0].name}-grams ({pct(by_strict[0].recall_at(strict))}) and "
        f"{by_strict[1].name}-grams ({pct(by_strict[1].recall_at(strict))}) and lowest with "
        f"{by_strict[-1].name}-grams ({pct(by_strict[-1].recall_at(strict))}){trend}."
    )

    # Unrelated pairs move away with longer shingles.
    p1 = {
        r.name: int(np.percentile(r.unrelated.hamming, 1, method="inverted_cdf")) for r in results
    }
    low_p1 = min(results, key=lambda r: p1[r.name])
    high_p1 = max(results, key=lambda r: p1[r.name])
    sentences.append(
        f"Unrelated stories share more short shingles: the 1st percentile of their distance "
        f"is {p1[low_p1.name]} bits with {low_p1.name}-grams against {p1[high_p1.name]} with "
        f"{high_p1.name}-grams (64 independent bits would give about 32 +- 4)."
    )

    # The closest unrelated pair, when several settings agree on it.
    def closest(result: SettingResult) -> set[int]:
        distances = result.unrelated.hamming
        return set(np.flatnonzero(distances == distances.min()).tolist())

    counts = Counter(index for r in results for index in closest(r))
    shared, shared_count = min(counts.items(), key=lambda item: (-item[1], item[0]))
    if shared_count > 1:
        sharing = [r for r in results if shared in closest(r)]
        example = next((r for r in sharing if (r.unit, r.size) == DEFAULT_SETTING), sharing[0])
        sentences.append(
            f"The unrelated pair closest in SimHash is the same under {shared_count} of the "
            f"{len(results)} settings ({join_names([r.name for r in sharing])}): "
            f"{pair_label(corpus, unrelated, shared)}, whose word 5-gram Jaccard is below 0.5 "
            f"but whose {example.name}-gram Jaccard is {example.unrelated.exact[shared]:.2f}. "
            "The random sample is not free of look-alikes, and this one pair decides the "
            "clean k of those settings."
        )

    # Best separation: recall at the largest k with no unrelated pair.
    best = max(results, key=lambda r: (r.hits_at(r.clean_k), r.clean_k))
    tied = [
        r
        for r in results
        if r is not best and best.hits_at(best.clean_k) - r.hits_at(r.clean_k) <= TIE_PAIRS
    ]
    claim = (
        f"Taking for each setting the largest k that no unrelated pair reaches (clean k), "
        f"{best.name}-grams keep the most J >= {NEAR_DUP_J} pairs: "
        f"{best.hits_at(best.clean_k)} of {near_count} at k = {best.clean_k}"
    )
    if tied:
        others = join_names(
            [f"{r.name}-grams ({r.hits_at(r.clean_k)} at k = {r.clean_k})" for r in tied]
        )
        verb = "comes" if len(tied) == 1 else "come"
        claim += f"; {others} {verb} within {TIE_PAIRS} pairs of that, a tie on this sample"
    worst = min(results, key=lambda r: (r.hits_at(r.clean_k), r.clean_k))
    worst_index = min(closest(worst))
    which = (
        "that pair"
        if shared_count > 1 and worst_index == shared
        else pair_label(corpus, unrelated, worst_index)
    )
    sentences.append(
        f"{claim}. {worst.name.capitalize()}-grams do worst ({worst.hits_at(worst.clean_k)} "
        f"at k = {worst.clean_k}), their closest unrelated pair being {which}, "
        f"{int(worst.unrelated.hamming[worst_index])} bits apart."
    )

    default_result = next((r for r in results if (r.unit, r.size) == DEFAULT_SETTING), None)
    if default_result is not None:
        ks = SUMMARY_KS
        sentences.append(
            f"With the default {default_result.name}-grams, k = "
            + ", ".join(str(k) for k in ks)
            + " find "
            + ", ".join(pct(default_result.recall_at(k)) for k in ks)
            + f" of the J >= {NEAR_DUP_J} pairs with "
            + ", ".join(str(default_result.false_at(k)) for k in ks)
            + f" of the {RANDOM_PAIRS:,} unrelated pairs within reach."
        )
    return " ".join(sentences)


def minhash_findings(results: Sequence[SettingResult], labelled: Pairs) -> str:
    sentences: list[str] = []
    worst_labelled = max(abs(mean_error(r.labelled)) for r in results)
    worst_unrelated = max(abs(mean_error(r.unrelated)) for r in results)
    ratios: list[float] = []
    for r in results:
        groups = [(r.labelled, band_mask(labelled.label, lo, hi)) for _, lo, hi in BANDS]
        groups.append((r.unrelated, np.ones(len(r.unrelated.hamming), dtype=bool)))
        for scores, mask in groups:
            expected = binomial_rmse(scores.exact[mask])
            if expected >= 0.005:  # rows of (nearly) identical texts have no error to speak of
                error = scores.estimate[mask] - scores.exact[mask]
                ratios.append(float(np.sqrt(np.mean(error**2))) / expected)
    seed_errors = [e for r in results for e in r.unrelated_error_by_seed.values()]
    both_signs = [
        r.name
        for r in results
        if min(r.unrelated_error_by_seed.values()) < 0 < max(r.unrelated_error_by_seed.values())
    ]
    sentences.append(
        f"Against the exact Jaccard of the same shingles, the mean error of the estimate is at "
        f"most {worst_labelled:.4f} in magnitude over the labelled pairs and "
        f"{worst_unrelated:.4f} over the unrelated ones (seed 0), and in every row with "
        f"J(1-J) not near 0 its RMSE is {min(ratios):.2f} to {max(ratios):.2f} times the "
        f"binomial sqrt(J(1-J)/{NUM_PERM})."
    )
    sentences.append(
        f"All pairs share one hash seed, so their errors are correlated: over seeds "
        f"{ERROR_SEEDS[0]}-{ERROR_SEEDS[-1]} the unrelated pairs' mean error ranges from "
        f"{signed(min(seed_errors))} to {signed(max(seed_errors))}"
        + (
            ", and it changes sign with the seed under "
            + (
                f"all {len(results)} settings"
                if len(both_signs) == len(results)
                else f"{len(both_signs)} of the {len(results)} settings ({join_names(both_signs)})"
            )
            + ": one seed's luck rather than a bias of the estimator."
            if both_signs
            else "."
        )
    )
    unrelated_j = sorted(results, key=lambda r: float(r.unrelated.exact.mean()))
    sentences.append(
        f"What the setting changes is what the Jaccard measures: the mean exact Jaccard of "
        f"unrelated stories ranges from {unrelated_j[0].unrelated.exact.mean():.3f} "
        f"({unrelated_j[0].name}-grams) to {unrelated_j[-1].unrelated.exact.mean():.3f} "
        f"({unrelated_j[-1].name}-grams)."
    )
    best = max(results, key=lambda r: (r.hits_above_unrelated, -r.max_unrelated_estimate))
    full = [r for r in results if r.hits_above_unrelated == best.hits_above_unrelated]
    if len(full) > 1:
        sentences.append(
            f"{join_names([r.name for r in full]).capitalize()}-grams all estimate "
            f"{pct(best.hits_above_unrelated / best.near_count)} of the J >= {NEAR_DUP_J} "
            f"pairs above every unrelated pair; of these {best.name}-grams leave the widest "
            f"gap, the highest unrelated estimate being {best.max_unrelated_estimate:.3f}."
        )
    else:
        sentences.append(
            f"{best.name.capitalize()}-grams estimate the most J >= {NEAR_DUP_J} pairs above every "
            f"unrelated pair ({pct(best.hits_above_unrelated / best.near_count)}, above "
            f"{best.max_unrelated_estimate:.3f})."
        )
    top = max(ESTIMATE_THRESHOLDS)
    least = min(results, key=lambda r: r.estimate_hits(top))
    most_false = max(results, key=lambda r: r.estimate_false(top))
    sentences.append(
        f"A threshold of {top} on the estimate keeps at least "
        f"{pct(least.estimate_hits(top) / least.near_count)} of those pairs under every "
        f"setting (fewest: {least.name}-grams) and lets through at most "
        f"{most_false.estimate_false(top)} unrelated "
        f"{'pair' if most_false.estimate_false(top) == 1 else 'pairs'} "
        f"({most_false.name}-grams)."
    )
    return " ".join(sentences)


def render(
    results: Sequence[SettingResult], corpus: Corpus, labelled: Pairs, unrelated: Pairs
) -> str:
    near_count = results[0].near_count
    skipped = corpus.total - len(corpus.ids)
    band_counts = "; ".join(
        f"{name}: {int(band_mask(labelled.label, low, high).sum())}" for name, low, high in BANDS
    )
    settings = ", ".join(f"{unit} {size}" for unit, size in SETTINGS)
    method = [
        f"""**Data.** Reuters-21578 (`../shared/data/reuters21578/reuters21578.jsonl`),
        {corpus.total:,} stories. A story's text is its title, a newline and its body,
        normalised by `app.core.text.normalize`; stories left out for an empty text:
        {skipped}.""",
        f"""**Labelled pairs.** The {len(labelled.label)} pairs of
        `reuters21578.near_dup_pairs.tsv`, whose true Jaccard of word 5-grams is >= 0.5
        ({band_counts}). "J" is always this labelled Jaccard; "J >= {NEAR_DUP_J}" means the
        {near_count} pairs of the first three bands.""",
        f"""**Unrelated pairs.** {RANDOM_PAIRS:,} pairs of distinct stories drawn uniformly
        at random with `random.Random({SEED})`, without repeats and leaving out the
        labelled pairs. As the labelled file lists every pair with J >= 0.5, all of them
        have J < 0.5.""",
        f"""**Fingerprints.** For each shingle setting ({settings}), `fingerprint(texts,
        FingerprintParams(unit, size, num_perm={NUM_PERM}, seed=0))` on batches of
        {BATCH_SIZE} stories: a 64-bit SimHash and {NUM_PERM} one-permutation MinHash
        values. "Ham" is the Hamming distance of two SimHashes, "est J" the MinHash
        estimate (the share of equal values).""",
        f"""**Exact Jaccard of the same shingles** ("exact J"), for every pair: Python sets
        of the character n-gram strings of the normalised texts; for word n-grams, sets of
        their 64-bit shingle hashes (`shingle_hashes`, one hash per distinct token n-gram).
        "est - exact" is the estimate's mean signed error, "RMSE" its root mean square, and
        "binomial RMSE" the RMSE of K = {NUM_PERM} independent samples, sqrt(mean J(1-J) /
        K), with the exact J.""",
        f"""Percentiles are observed values (inverted CDF). False-positive (FP) rates are
        shares of the {RANDOM_PAIRS:,} unrelated pairs: one pair is
        {fp_rate(1)}.""",
    ]
    legend = f"""'recall <=k': share of the {near_count} J >= {NEAR_DUP_J} pairs whose
        SimHashes are at most k bits apart; 'FP <=k': the same for the unrelated pairs.
        'Clean k': the largest k that no unrelated pair falls within. 'max unrel. est': the
        highest MinHash estimate of an unrelated pair; 'recall above': the share of J >=
        {NEAR_DUP_J} pairs estimated strictly higher. 'est err': mean of (estimate - exact
        Jaccard of the same shingles) with seed 0; for the unrelated pairs also its range
        over seeds {ERROR_SEEDS[0]}-{ERROR_SEEDS[-1]}, since all pairs share one seed and
        one seed's mean error is not an average of independent errors."""
    per_setting = """Each first table gives, per band of labelled J and for the unrelated
        pairs, the SimHash Hamming distances and the MinHash estimate; each second table,
        how many pairs pass a SimHash or MinHash threshold."""
    parts = [
        "# Fingerprints on Reuters-21578: which shingles separate near-duplicates",
        "Generated by `bench/reuters_fingerprints.py` (deterministic); do not edit by hand.",
        "## Method",
        "\n".join(paragraph(item, bullet=True) for item in method),
        "## Summary",
        paragraph(legend),
        summary_table(results),
        "### What this says",
        paragraph(f"**SimHash.** {simhash_findings(results, corpus, unrelated)}"),
        paragraph(f"**MinHash.** {minhash_findings(results, labelled)}"),
        "## Per setting",
        paragraph(per_setting),
        *(setting_section(result, labelled).rstrip("\n") for result in results),
    ]
    return "\n\n".join(parts) + "\n"


def main() -> int:
    corpus = load_corpus()
    if corpus is None:
        print(f"{DATA_DIR} not found: this benchmark needs the shared data set", file=sys.stderr)
        return 1
    labelled = load_labelled_pairs(corpus)
    unrelated = sample_unrelated_pairs(RANDOM_PAIRS, len(corpus.ids), labelled, SEED)
    results: list[SettingResult] = []
    for unit, size in SETTINGS:
        start = time.perf_counter()
        results.append(measure_setting(unit, size, corpus, labelled, unrelated))
        print(f"{unit} {size}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    report = render(results, corpus, labelled, unrelated)
    OUTPUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT_PATH.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
