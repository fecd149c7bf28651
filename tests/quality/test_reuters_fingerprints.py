"""MinHash and SimHash on real news texts: Reuters-21578 from ../shared/data.

The MinHash estimate is checked against exact Jaccard similarities (Python sets of the
character 5-gram strings of the normalised texts) on pairs spread over the whole range
0..1: the labelled near-duplicates cover 0.5..1, stories sharing a topic the low end, and
stories paired with a random prefix or suffix of themselves the middle.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from app.core.fingerprint import (
    FingerprintParams,
    fingerprint_normalized,
    hamming_distance,
    jaccard_estimate,
)
from app.core.text import normalize

DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared/data/reuters21578"
STORIES_PATH = DATA_DIR / "reuters21578.jsonl"
PAIRS_PATH = DATA_DIR / "reuters21578.near_dup_pairs.tsv"
SKIP_REASON = "../shared/data/reuters21578 not found: the Reuters checks need the shared data set"

PARAMS = FingerprintParams()  # the defaults: character 5-grams, 128 MinHash values
SEED = 1987
LABELLED_PAIRS = 100
SAME_TOPIC_PAIRS = 100
TRUNCATED_PAIRS = 150
MIN_TRUNCATED_LENGTH = 400  # characters of normalised text, so a cut keeps enough shingles


@dataclass(frozen=True, slots=True)
class Reuters:
    texts: dict[int, str]  # story id -> normalised title + newline + body (non-empty only)
    topics: dict[int, list[str]]
    labelled: list[tuple[int, int, float]]  # id_a, id_b, labelled word 5-gram Jaccard


@pytest.fixture(scope="module")
def reuters() -> Reuters:
    if not (STORIES_PATH.is_file() and PAIRS_PATH.is_file()):
        pytest.skip(SKIP_REASON)
    texts: dict[int, str] = {}
    topics: dict[int, list[str]] = {}
    with STORIES_PATH.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            story = json.loads(line)
            text = normalize(f"{story.get('title') or ''}\n{story.get('body') or ''}")
            if text:
                texts[int(story["id"])] = text
                topics[int(story["id"])] = list(story.get("topics") or [])
    with PAIRS_PATH.open(encoding="utf-8", newline="") as handle:
        labelled = [
            (int(row["id_a"]), int(row["id_b"]), float(row["jaccard"]))
            for row in csv.DictReader(handle, delimiter="\t")
        ]
    return Reuters(texts, topics, labelled)


def char_shingles(text: str, size: int) -> set[str]:
    """Distinct character n-grams; a text shorter than n is one shingle, as in the core."""
    if len(text) < size:
        return {text}
    return {text[i : i + size] for i in range(len(text) - size + 1)}


def exact_jaccard(a: str, b: str) -> float:
    shingles_a = char_shingles(a, PARAMS.size)
    shingles_b = char_shingles(b, PARAMS.size)
    return len(shingles_a & shingles_b) / len(shingles_a | shingles_b)


def estimated_jaccard(a: str, b: str) -> float:
    fp = fingerprint_normalized([a, b], PARAMS)
    return float(jaccard_estimate(fp.minhash[0], fp.minhash[1:])[0])


def text_pairs(reuters: Reuters, rng: random.Random) -> list[tuple[str, str]]:
    """Seeded pairs of normalised texts over the whole Jaccard range."""
    texts = reuters.texts
    pairs = [(texts[a], texts[b]) for a, b, _ in rng.sample(reuters.labelled, LABELLED_PAIRS)]

    by_topic: dict[str, list[int]] = defaultdict(list)
    for story_id in sorted(texts):
        for topic in reuters.topics[story_id]:
            by_topic[topic].append(story_id)
    shared_topics = sorted(topic for topic, ids in by_topic.items() if len(ids) >= 2)
    for _ in range(SAME_TOPIC_PAIRS):
        a, b = rng.sample(by_topic[rng.choice(shared_topics)], 2)
        pairs.append((texts[a], texts[b]))

    long_ids = sorted(i for i, text in texts.items() if len(text) >= MIN_TRUNCATED_LENGTH)
    for story_id in rng.sample(long_ids, TRUNCATED_PAIRS):
        text = texts[story_id]
        cut = int(len(text) * rng.uniform(0.1, 0.9))
        part = text[:cut] if rng.random() < 0.5 else text[len(text) - cut :]
        pairs.append((text, part.strip()))
    return pairs


@pytest.mark.data
def test_minhash_estimates_real_jaccard_without_bias(reuters: Reuters) -> None:
    pairs = text_pairs(reuters, random.Random(SEED))
    exact = np.array([exact_jaccard(a, b) for a, b in pairs])
    estimate = np.array([estimated_jaccard(a, b) for a, b in pairs])

    # The pairs really do spread over 0..1, not just over the near-duplicate end.
    counts, _ = np.histogram(exact, bins=5, range=(0.0, 1.0))
    assert len(pairs) >= 300
    assert counts.min() >= 25, f"pairs per fifth of the Jaccard range: {counts.tolist()}"

    error = estimate - exact
    binomial_rmse = math.sqrt(float(np.mean(exact * (1 - exact))) / PARAMS.num_perm)
    rmse = math.sqrt(float(np.mean(error**2)))
    assert abs(error.mean()) <= 0.01, f"mean error {error.mean():+.4f}"
    assert rmse <= 1.2 * binomial_rmse, f"RMSE {rmse:.4f}, binomial {binomial_rmse:.4f}"


@pytest.mark.data
def test_labelled_identical_pairs_have_close_simhashes(reuters: Reuters) -> None:
    identical = [(a, b) for a, b, jaccard in reuters.labelled if jaccard == 1.0]
    texts = reuters.texts
    fp = fingerprint_normalized(
        [texts[story_id] for pair in identical for story_id in pair], PARAMS
    )
    distances = np.array(
        [
            int(hamming_distance(fp.simhash[2 * i], fp.simhash[2 * i + 1 : 2 * i + 2])[0])
            for i in range(len(identical))
        ]
    )
    same_text = np.array([texts[a] == texts[b] for a, b in identical])

    # Word 5-gram Jaccard 1.0 does not mean equal texts: 11 of the 275 pairs differ in
    # punctuation ("<btom.mi>" / "[btom.mi]") or a few characters, which moves character
    # 5-grams and so the SimHash. Measured: 270 of 275 within 3 bits (the farthest 9 bits
    # apart), and 269 to 272 under each of the seeds 0-9, so "all within 3 bits" would be
    # false; the share is the robust claim.
    assert len(identical) >= 250
    assert np.all(distances[same_text] == 0)
    assert np.mean(distances <= 3) >= 0.95, f"within 3 bits: {np.mean(distances <= 3):.3f}"
