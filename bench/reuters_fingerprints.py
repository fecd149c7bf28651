"""How well SimHash and MinHash separate Reuters-21578 near-duplicates, per shingle setting.

Run ``.venv/bin/python bench/reuters_fingerprints.py``: it fingerprints every story under
each shingle setting, compares the labelled near-duplicate pairs with seeded random pairs
of unrelated stories, writes docs/fingerprints.md and prints it. Deterministic (fixed
seed); a few minutes on one core.
"""

from __future__ import annotations

import csv
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.fingerprint import FingerprintParams, ShingleUnit, fingerprint, shingle_hashes
from app.core.text import normalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_reuters, reuters_text

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
# Bands of the labelled (word 5-gram) Jaccard: name, lower bound, upper bound (exclusive,
# except that the first band is exactly 1).
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


@dataclass(frozen=True, slots=True)
class Pairs:
    """Pairs of stories as row indices into the story list, with their labelled Jaccard."""

    left: np.ndarray  # int64[P]
    right: np.ndarray  # int64[P]
    label: np.ndarray  # float64[P]; NaN for unrelated pairs


@dataclass(frozen=True, slots=True)
class PairScores:
    """Per-pair results of one shingle setting."""

    hamming: np.ndarray  # int64[P]
    estimate: np.ndarray  # float64[P]: MinHash Jaccard estimate
    exact: np.ndarray  # float64[P]: exact Jaccard of the same shingles


@dataclass(frozen=True, slots=True)
class SettingResult:
    unit: ShingleUnit
    size: int
    seconds: float
    labelled: PairScores
    unrelated: PairScores

    @property
    def name(self) -> str:
        return f"{self.unit} {self.size}"


# ---------------------------------------------------------------------------- data


def load_stories() -> tuple[int, list[int], list[str], list[str]] | None:
    """Story count, then ids, raw and normalised texts of every story whose text is not empty."""
    stories = load_reuters()
    if stories is None:
        return None
    stories.sort(key=lambda story: int(story["id"]))
    ids: list[int] = []
    raw: list[str] = []
    normalized: list[str] = []
    for story in stories:
        text = reuters_text(story)
        clean = normalize(text)
        if clean:
            ids.append(int(story["id"]))
            raw.append(text)
            normalized.append(clean)
    return len(stories), ids, raw, normalized


def load_labelled_pairs(row_of: dict[int, int]) -> Pairs:
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
    chosen: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(chosen) < count:
        a, b = rng.sample(range(stories), 2)
        key = (min(a, b), max(a, b))
        if key in excluded or key in seen:
            continue
        seen.add(key)
        chosen.append(key)
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


def score_pairs(
    simhash: np.ndarray, minhash: np.ndarray, pairs: Pairs, exact: np.ndarray
) -> PairScores:
    # Row by row, the same as app.core.fingerprint.hamming_distance and jaccard_estimate.
    hamming = np.bitwise_count(simhash[pairs.left] ^ simhash[pairs.right]).astype(np.int64)
    estimate = np.mean(minhash[pairs.left] == minhash[pairs.right], axis=1)
    return PairScores(hamming, estimate, exact)


def measure_setting(
    unit: ShingleUnit,
    size: int,
    raw: Sequence[str],
    normalized: Sequence[str],
    labelled: Pairs,
    unrelated: Pairs,
) -> SettingResult:
    params = FingerprintParams(unit=unit, size=size, num_perm=NUM_PERM, seed=0)
    start = time.perf_counter()
    simhash = np.empty(len(raw), dtype=np.uint64)
    minhash = np.empty((len(raw), NUM_PERM), dtype=np.uint32)
    for begin in range(0, len(raw), BATCH_SIZE):
        batch = fingerprint(list(raw[begin : begin + BATCH_SIZE]), params)
        simhash[begin : begin + len(batch)] = batch.simhash
        minhash[begin : begin + len(batch)] = batch.minhash
    seconds = time.perf_counter() - start
    return SettingResult(
        unit=unit,
        size=size,
        seconds=seconds,
        labelled=score_pairs(
            simhash, minhash, labelled, exact_jaccard(labelled, normalized, params)
        ),
        unrelated=score_pairs(
            simhash, minhash, unrelated, exact_jaccard(unrelated, normalized, params)
        ),
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


def signed(value: float) -> str:
    return f"{value:+.4f}"


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
    ]


def near_dup_mask(result: SettingResult, labelled: Pairs) -> np.ndarray:
    mask: np.ndarray = labelled.label >= NEAR_DUP_J
    return mask


def clean_k(result: SettingResult) -> int:
    """The largest Hamming threshold no unrelated pair falls within."""
    return int(result.unrelated.hamming.min()) - 1


def clean_estimate(result: SettingResult) -> float:
    """The highest MinHash estimate among unrelated pairs: a threshold above it is clean."""
    return float(result.unrelated.estimate.max())


def setting_section(result: SettingResult, labelled: Pairs) -> str:
    rows = [
        score_row(name, result.labelled, band_mask(labelled.label, low, high))
        for name, low, high in BANDS
    ]
    rows.append(
        score_row("unrelated", result.unrelated, np.ones(len(result.unrelated.hamming), bool))
    )
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
        ],
        rows,
    )
    near = near_dup_mask(result, labelled)
    near_count = int(near.sum())
    near_hamming = result.labelled.hamming[near]
    near_estimate = result.labelled.estimate[near]
    thresholds: list[list[str]] = []
    for k in HAMMING_KS:
        hits = int((near_hamming <= k).sum())
        false = int((result.unrelated.hamming <= k).sum())
        thresholds.append(
            [f"Hamming <= {k}", f"{pct(hits / near_count)} ({hits})", f"{false / RANDOM_PAIRS:.3%}"]
        )
    for t in ESTIMATE_THRESHOLDS:
        hits = int((near_estimate >= t).sum())
        false = int((result.unrelated.estimate >= t).sum())
        thresholds.append(
            [
                f"estimate >= {t}",
                f"{pct(hits / near_count)} ({hits})",
                f"{false / RANDOM_PAIRS:.3%}",
            ]
        )
    passing = table(
        ["test", f"J >= {NEAR_DUP_J} pairs passing (of {near_count})", "unrelated passing"],
        thresholds,
    )
    return (
        f"### {result.name}-grams\n\n"
        f"Fingerprinting all stories took {result.seconds:.1f} s.\n\n{bands}\n\n{passing}\n"
    )


def summary_rows(results: Sequence[SettingResult], labelled: Pairs) -> list[list[str]]:
    rows: list[list[str]] = []
    for result in results:
        near = near_dup_mask(result, labelled)
        near_hamming = result.labelled.hamming[near]
        recall = [pct(float(np.mean(near_hamming <= k))) for k in SUMMARY_KS]
        false = [str(int((result.unrelated.hamming <= k).sum())) for k in SUMMARY_KS]
        k_clean = clean_k(result)
        t_clean = clean_estimate(result)
        all_error = np.concatenate(
            [
                result.labelled.estimate - result.labelled.exact,
                result.unrelated.estimate - result.unrelated.exact,
            ]
        )
        rows.append(
            [
                result.name,
                *recall,
                *false,
                str(k_clean),
                pct(float(np.mean(near_hamming <= k_clean))),
                f"{t_clean:.3f}",
                pct(float(np.mean(result.labelled.estimate[near] > t_clean))),
                signed(float(all_error.mean())),
            ]
        )
    return rows


def best_by(
    results: Sequence[SettingResult], key: Callable[[SettingResult], tuple[float, ...]]
) -> SettingResult:
    return max(results, key=key)


def findings(results: Sequence[SettingResult], labelled: Pairs) -> str:
    """The "what this says" paragraph, every claim computed from the tables' figures."""

    def near(result: SettingResult) -> np.ndarray:
        return near_dup_mask(result, labelled)

    def recall_at_clean_k(result: SettingResult) -> float:
        return float(np.mean(result.labelled.hamming[near(result)] <= clean_k(result)))

    def recall_above_clean_estimate(result: SettingResult) -> float:
        return float(np.mean(result.labelled.estimate[near(result)] > clean_estimate(result)))

    def recall_at(result: SettingResult, k: int) -> float:
        return float(np.mean(result.labelled.hamming[near(result)] <= k))

    def false_at(result: SettingResult, k: int) -> int:
        return int((result.unrelated.hamming <= k).sum())

    sim_best = best_by(results, lambda r: (recall_at_clean_k(r), clean_k(r)))
    sim_ranking = sorted(results, key=lambda r: -recall_at_clean_k(r))
    runner_up = sim_ranking[1]
    min_best = best_by(results, lambda r: (recall_above_clean_estimate(r), -clean_estimate(r)))
    low_unrelated = min(results, key=lambda r: float(r.unrelated.hamming.min()))
    high_unrelated = max(results, key=lambda r: float(r.unrelated.hamming.min()))
    errors = [
        float(
            np.mean(
                np.concatenate(
                    [
                        r.labelled.estimate - r.labelled.exact,
                        r.unrelated.estimate - r.unrelated.exact,
                    ]
                )
            )
        )
        for r in results
    ]
    worst_error = max(errors, key=abs)
    default = next((r for r in results if (r.unit, r.size) == ("char", 5)), None)

    sentences = [
        f"**SimHash.** Measured by the recall of the J >= {NEAR_DUP_J} pairs at the largest "
        "Hamming threshold that no one of the "
        f"{RANDOM_PAIRS:,} unrelated pairs falls within, {sim_best.name}-grams separate best: "
        f"k = {clean_k(sim_best)} keeps {pct(recall_at_clean_k(sim_best))} of them "
        f"(next: {runner_up.name}-grams, {pct(recall_at_clean_k(runner_up))} at "
        f"k = {clean_k(runner_up)}).",
        f"The closest unrelated pair is {int(low_unrelated.unrelated.hamming.min())} bits "
        f"apart with {low_unrelated.name}-grams and {int(high_unrelated.unrelated.hamming.min())} "
        f"with {high_unrelated.name}-grams.",
    ]
    if default is not None:
        sentences.append(
            f"With the default char 5-grams, Hamming <= 3 finds "
            f"{pct(recall_at(default, 3))} of the J >= {NEAR_DUP_J} pairs, <= 6 finds "
            f"{pct(recall_at(default, 6))} and <= 10 finds {pct(recall_at(default, 10))}, "
            f"with {false_at(default, 3)}, {false_at(default, 6)} and {false_at(default, 10)} "
            f"of the {RANDOM_PAIRS:,} unrelated pairs within those distances."
        )
    sentences += [
        f"**MinHash.** The estimator is unbiased under every setting: the mean of "
        f"(estimate - exact Jaccard of the same shingles) over all pairs is at most "
        f"{abs(worst_error):.4f} in magnitude.",
        "What the setting changes is what Jaccard means: the exact Jaccard of unrelated "
        "stories (the 'exact J' of the 'unrelated' rows) is highest for the shortest shingles.",
        f"Ranked by the share of J >= {NEAR_DUP_J} pairs whose estimate is above every "
        f"unrelated pair's, {min_best.name}-grams do best: "
        f"{pct(recall_above_clean_estimate(min_best))} above {clean_estimate(min_best):.3f}.",
    ]
    return " ".join(sentences)


def render(results: Sequence[SettingResult], labelled: Pairs, stories: int, skipped: int) -> str:
    near_count = int((labelled.label >= NEAR_DUP_J).sum())
    band_counts = ", ".join(
        f"{name}: {int(band_mask(labelled.label, low, high).sum())}" for name, low, high in BANDS
    )
    summary = table(
        [
            "setting",
            *(f"recall k={k}" for k in SUMMARY_KS),
            *(f"unrelated k={k}" for k in SUMMARY_KS),
            "clean k",
            "recall at clean k",
            "max unrelated est",
            "recall above it",
            "mean est - exact",
        ],
        summary_rows(results, labelled),
    )
    sections = "\n".join(setting_section(result, labelled) for result in results)
    return f"""# Fingerprints on Reuters-21578: which shingles separate near-duplicates

Generated by `bench/reuters_fingerprints.py`; do not edit by hand.

## Method

- **Data.** Reuters-21578 (`../shared/data/reuters21578/reuters21578.jsonl`), {stories:,}
  stories; the text of a story is its title, a newline, and its body, normalised by
  `app.core.text.normalize` ({skipped} story with an empty text is left out).
- **Labelled pairs.** The {len(labelled.label)} pairs of
  `reuters21578.near_dup_pairs.tsv`, whose true Jaccard of word 5-grams is >= 0.5
  ({band_counts}). "J" below is always this labelled Jaccard; "J >= {NEAR_DUP_J}" means
  the {near_count} pairs in the first three bands.
- **Unrelated pairs.** {RANDOM_PAIRS:,} pairs of distinct stories drawn uniformly at
  random with `random.Random({SEED})`, without repeats and leaving out labelled pairs.
  Since the labelled file lists every pair with J >= 0.5, all of them have J < 0.5;
  most share little beyond newswire vocabulary.
- **Fingerprints.** `fingerprint(texts, FingerprintParams(unit, size, num_perm={NUM_PERM},
  seed=0))` on batches of {BATCH_SIZE} stories: 64-bit SimHash and {NUM_PERM}-value
  one-permutation MinHash. "Ham" is the Hamming distance of two SimHashes; "est J" the
  MinHash Jaccard estimate (the fraction of equal values).
- **Exact Jaccard of the same shingles** ("exact J"), for every pair: Python sets of the
  character n-gram strings of the normalised texts, or for word n-grams the sets of their
  64-bit shingle hashes (`shingle_hashes`, one hash per distinct token n-gram).
  "est - exact" is the mean signed error of the estimate and "RMSE" its root mean square.
- Percentiles are observed values (inverted CDF); "passing" fractions of unrelated pairs
  are out of {RANDOM_PAIRS:,}.

## Summary

Recall is the share of the {near_count} labelled pairs with J >= {NEAR_DUP_J} whose
SimHashes are within k bits; "unrelated k" is the number of the {RANDOM_PAIRS:,} unrelated
pairs within k bits (false positives). "Clean k" is the largest k that no unrelated pair
falls within; "max unrelated est" the highest MinHash estimate of an unrelated pair, and
"recall above it" the share of J >= {NEAR_DUP_J} pairs estimated strictly higher. "Mean est
- exact" is over all labelled and unrelated pairs.

{summary}

### What this says

{findings(results, labelled)}

## Per setting

{sections}"""


def main() -> int:
    loaded = load_stories()
    if loaded is None or not PAIRS_PATH.is_file():
        print(f"{DATA_DIR} not found: this benchmark needs the shared data set", file=sys.stderr)
        return 1
    total, ids, raw, normalized = loaded
    row_of = {story_id: row for row, story_id in enumerate(ids)}
    labelled = load_labelled_pairs(row_of)
    unrelated = sample_unrelated_pairs(RANDOM_PAIRS, len(ids), labelled, SEED)
    results: list[SettingResult] = []
    for unit, size in SETTINGS:
        start = time.perf_counter()
        results.append(measure_setting(unit, size, raw, normalized, labelled, unrelated))
        print(f"{unit} {size}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    report = render(results, labelled, total, total - len(ids))
    OUTPUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT_PATH.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
