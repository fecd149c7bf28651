"""Reuters-21578 replayed through the HTTP API, scored against the labelled pairs.

Run ``.venv/bin/python -m bench.reuters_http [--mode asgi|process] [--window]``. Every
story (title, newline, body; the empty one too, which the service refuses at its position)
is POSTed in date order, 256 to a batch, to
``/v1/collections/{name}/documents/batch``; the matches of each result (earlier documents,
earlier ones of the same batch included) are the pairs the service found. They are scored
against ``reuters21578.near_dup_pairs.tsv`` (near-duplicates: labelled J >= 0.8), and so
are the pairs found by the peer a user would otherwise write, datasketch's MinHashLSH on the
service's default shingles (app/collection_config.py), and on character 5-grams, the former
default, for reference. ``asgi`` (the default) drives the application in process through
Starlette's TestClient; ``process`` starts the real ``neardup serve`` on a free port and
talks to it with httpx over 127.0.0.1. Writes docs/evaluation-http.md and prints it.

The quality figures are deterministic and the same in both modes; the throughput is for
information only (one run, no core pinning). Each mode's figures are also saved to
bench/results/reuters_http-<mode>.json, and the report lists the other mode's figures from
there when it has been run with the same default settings.

``--window`` replays by date with each story's own timestamp, with and without a match
window, through the same replay and scoring: each story also carries its `date` as
``timestamp`` and the collection a ``match_window``, so that a story matches only stories
published within that time of it. Rows: the unwindowed replay (no timestamps: the
reference run of docs/evaluation-http.md), the same with timestamps (which alone change
nothing), then windows of 1 h, 24 h, 48 h and 7 d; the same with the n-gram index of
short texts switched off, whose matches among title-only bulletins are most of the false
positives at the defaults. Also the time between the two stories of every labelled pair,
which bounds what a window can keep. Writes docs/evaluation-window.md (and
bench/results/reuters_window.json) and prints it; the figures are deterministic.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

import httpx

from app.collection_config import CollectionConfig, ShingleConfig
from app.core.fingerprint import (
    FingerprintParams,
    ShingleUnit,
    fingerprint,
    hamming_distance,
    jaccard_estimate,
    shingle_hashes,
)
from app.core.lsh import candidate_probability, optimal_bands
from app.core.text import normalize
from app.core.verify import UNCERTAIN
from app.service import INSERT_MATCH_LIMIT
from devkit.harness import (
    REPO_ROOT,
    cpu_model_name,
    load_reuters,
    markdown_table,
    reuters_date,
    reuters_text,
    write_result,
)

DATA_DIR = REPO_ROOT.parent / "shared/data/reuters21578"
PAIRS_PATH = DATA_DIR / "reuters21578.near_dup_pairs.tsv"
CLUSTERS_PATH = DATA_DIR / "reuters21578.clusters_j0.8.jsonl"
OUTPUT_PATH = REPO_ROOT / "docs" / "evaluation-http.md"

COLLECTION = "reuters"
BATCH_SIZE = 256
NEAR_DUP_J = 0.8  # labelled pairs at or above this are the near-duplicates to find
RELATED_J = 0.5  # the labelled file lists every pair at or above this
LABEL_ROUNDING = 5e-5 + 1e-12  # the labels' Jaccard has four decimals
# The service's default collection settings: what the main replay runs with, and the
# shingles the peer is given.
DEFAULTS = CollectionConfig()
SERVICE_PARAMS = DEFAULTS.fingerprint_params
NUM_PERM = DEFAULTS.minhash.num_perm
LSH_THRESHOLD = DEFAULTS.minhash.threshold
MAX_DISTANCE = DEFAULTS.simhash.max_distance
# The parts of the collection settings that decide what matches (CollectionConfig.to_dict).
MATCHING_SETTINGS = ("shingle", "simhash", "minhash")
# The default shingles before docs/evaluation.md: a variant and a second peer row.
FORMER_SHINGLE = ShingleConfig(unit="char", size=5)
SIMILAR_LIMIT = 50
EXAMPLES = 6


def shingle_name(shingle: ShingleConfig) -> str:
    """E.g. "word 5-grams" or "character 5-grams"."""
    return f"{'character' if shingle.unit == 'char' else 'word'} {shingle.size}-grams"


def shingle_short(shingle: ShingleConfig) -> str:
    """E.g. "word-5" or "char-5", for table headers."""
    return f"{shingle.unit}-{shingle.size}"


OWN = shingle_short(DEFAULTS.shingle)  # "word-5" with today's defaults
FORMER = shingle_short(FORMER_SHINGLE)
WITHOUT_SIMHASH = "without SimHash"
FORMER_VARIANT = f"{shingle_name(FORMER_SHINGLE)} (the former default)"
# Collection settings replayed besides the defaults, to show where the errors come from.
VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    (WITHOUT_SIMHASH, {"simhash": {"enabled": False}}),
    (FORMER_VARIANT, {"shingle": {"unit": FORMER_SHINGLE.unit, "size": FORMER_SHINGLE.size}}),
)
# Exact Jaccard of a setting's shingles (no MinHash error) at these thresholds: the
# default shingles at the service's threshold, the former default at several.
ORACLES: tuple[tuple[ShingleConfig, tuple[float, ...]], ...] = (
    (DEFAULTS.shingle, (LSH_THRESHOLD,)),
    (FORMER_SHINGLE, (0.8, 0.85, 0.9, 0.95)),
)
# Targets of the evaluation.
TARGET_F1 = 0.97

Mode = Literal["asgi", "process"]
Pair = tuple[str, str]  # (smaller id, larger id) as strings


# Starlette's TestClient is an httpx.Client too: the replay runs the same on both.
HttpClient = httpx.Client


def pair(a: str, b: str) -> Pair:
    return (a, b) if a < b else (b, a)


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Corpus:
    """The stories to replay, in date order, and the labels to score against."""

    total: int  # stories in the file
    ids: list[str]  # stories with a non-empty text, date order
    texts: dict[str, str]  # id -> title + newline + body, for every story
    skipped: list[str]  # ids of stories whose text is empty (the service refuses them)
    sent: list[str]  # every story, date order: what the replay posts
    labelled: dict[Pair, float]  # every labelled pair (J >= 0.5) -> labelled Jaccard
    clusters: list[list[str]]  # connected components of the pairs with J >= 0.8
    # id -> the story's `date` as ISO 8601 (read as UTC), for replays that send it
    dates: dict[str, str] = field(default_factory=dict)

    def positives(self) -> set[Pair]:
        return {p for p, j in self.labelled.items() if j >= NEAR_DUP_J}


def load_corpus() -> Corpus | None:
    """The Reuters stories and labels from ../shared/data, or None when absent."""
    if not (PAIRS_PATH.is_file() and CLUSTERS_PATH.is_file()):
        return None
    stories = load_reuters()
    if stories is None:
        return None
    ids: list[str] = []
    texts: dict[str, str] = {}
    skipped: list[str] = []
    for story in stories:
        story_id, text = str(story["id"]), reuters_text(story)
        texts[story_id] = text
        (ids if text.strip() else skipped).append(story_id)
    with PAIRS_PATH.open(encoding="utf-8", newline="") as handle:
        labelled = {
            pair(row["id_a"], row["id_b"]): float(row["jaccard"])
            for row in csv.DictReader(handle, delimiter="\t")
        }
    with CLUSTERS_PATH.open(encoding="utf-8") as lines:
        clusters = [json.loads(line)["ids"] for line in lines if line.strip()]
    sent = [str(story["id"]) for story in stories]
    dates = {
        str(story["id"]): reuters_date(story["date"]).isoformat(timespec="microseconds") + "Z"
        for story in stories
    }
    return Corpus(len(stories), ids, texts, skipped, sent, labelled, clusters, dates)


# ---------------------------------------------------------------------------- replay


@dataclass(frozen=True, slots=True)
class FoundMatch:
    similarity: float
    hamming_distance: int
    methods: tuple[str, ...]


@dataclass(slots=True)
class Replay:
    """What one replay through the API produced."""

    found: dict[Pair, FoundMatch] = field(default_factory=dict)
    cluster_of: dict[str, str] = field(default_factory=dict)  # id -> cluster_id at insert
    capped: list[str] = field(default_factory=list)  # ids whose result held the maximum
    refused: dict[str, str] = field(default_factory=dict)  # id -> error code of its result
    batches: int = 0
    seconds: float = 0.0  # inside the batch POSTs only

    @property
    def documents(self) -> int:
        return len(self.cluster_of)


def create_collection(
    client: HttpClient, name: str = COLLECTION, settings: dict[str, Any] | None = None
) -> None:
    """A fresh collection with these settings (the defaults when None)."""
    response = client.put(f"/v1/collections/{name}", json=settings or {})
    if response.status_code != 201:
        raise RuntimeError(f"PUT collection {name}: {response.status_code} {response.text}")


def replay_http(
    client: HttpClient,
    corpus: Corpus,
    name: str = COLLECTION,
    batch_size: int = BATCH_SIZE,
    settings: dict[str, Any] | None = None,
    timestamps: dict[str, str] | None = None,
) -> Replay:
    """POST every story in date order, ``batch_size`` to a batch, on_duplicate insert,
    the empty one too: the service refuses it at its position and stores the others.
    With ``timestamps`` (id -> ISO 8601, e.g. ``corpus.dates``), each story is sent with
    its own time."""
    create_collection(client, name, settings)
    replay = Replay()
    url = f"/v1/collections/{name}/documents/batch"
    clock = time.perf_counter
    for start in range(0, len(corpus.sent), batch_size):
        ids = corpus.sent[start : start + batch_size]
        documents: list[dict[str, Any]] = [{"id": i, "text": corpus.texts[i]} for i in ids]
        if timestamps is not None:
            for document in documents:
                document["timestamp"] = timestamps[document["id"]]
        body = {"documents": documents, "on_duplicate": "insert"}
        began = clock()
        response = client.post(url, json=body)
        replay.seconds += clock() - began
        if response.status_code != 200:
            raise RuntimeError(f"batch at {start}: {response.status_code} {response.text[:500]}")
        results = response.json()["results"]
        if [result["id"] for result in results] != ids:
            raise RuntimeError(f"batch at {start}: results not in the order sent")
        for result in results:
            story_id = result["id"]
            if "error" in result:
                replay.refused[story_id] = result["error"]["code"]
                if story_id not in corpus.skipped:
                    raise RuntimeError(f"{story_id} was refused: {result}")
                continue
            if not result["inserted"]:
                raise RuntimeError(f"{story_id} was not inserted: {result}")
            replay.cluster_of[story_id] = result["cluster_id"]
            matches = result["matches"]
            if len(matches) >= INSERT_MATCH_LIMIT:
                replay.capped.append(story_id)
            for match in matches:
                replay.found[pair(match["id"], story_id)] = FoundMatch(
                    match["similarity"], match["hamming_distance"], tuple(match["methods"])
                )
        replay.batches += 1
    return replay


def datasketch_shingles(text: str, shingle: ShingleConfig) -> list[bytes]:
    """The shingles datasketch is fed, as bytes, from the normalised text.

    Word n-grams: the service's own 64-bit shingle hashes, 8 bytes each, so datasketch sees
    exactly the service's shingle sets (same tokeniser, same n-grams). Character n-grams:
    the UTF-8 n-gram strings ``s[i:i+n]``; a shorter text is one shingle, as in the service.
    """
    s = normalize(text)
    n = shingle.size
    if shingle.unit == "word":
        params = FingerprintParams(unit=shingle.unit, size=n)
        raw = shingle_hashes(s, params).astype("<u8").tobytes()
        return [raw[i : i + 8] for i in range(0, len(raw), 8)]
    if len(s) < n:
        return [s.encode("utf-8")]
    return [s[i : i + n].encode("utf-8") for i in range(len(s) - n + 1)]


@dataclass(frozen=True, slots=True)
class PeerRun:
    found: set[Pair]
    seconds: float
    bands: int
    rows: int


def replay_datasketch(corpus: Corpus, shingle: ShingleConfig) -> PeerRun:
    """datasketch MinHashLSH(0.8, 128) on these shingles: query each story, then insert it."""
    from datasketch import MinHash, MinHashLSH  # type: ignore[import-untyped]

    lsh = MinHashLSH(threshold=LSH_THRESHOLD, num_perm=NUM_PERM)
    found: set[Pair] = set()
    began = time.perf_counter()
    for story_id in corpus.ids:
        signature = MinHash(num_perm=NUM_PERM)
        signature.update_batch(datasketch_shingles(corpus.texts[story_id], shingle))
        for other in lsh.query(signature):
            found.add(pair(other, story_id))
        lsh.insert(story_id, signature)
    return PeerRun(found, time.perf_counter() - began, lsh.b, lsh.r)


# ---------------------------------------------------------------------------- scores


@dataclass(frozen=True, slots=True)
class Scores:
    found: int
    true_positives: int
    false_positives: int  # found, not labelled J >= 0.8
    related_found: int  # of the false positives, labelled J in [0.5, 0.8)
    positives: int
    precision: float
    recall: float
    f1: float
    lenient_precision: float  # related pairs found are not counted as false positives
    identical: int
    identical_found: int
    related: int
    related_recall: float

    @property
    def identical_recall(self) -> float:
        return self.identical_found / self.identical if self.identical else 1.0


def score(found: set[Pair], corpus: Corpus) -> Scores:
    labelled = corpus.labelled
    positives = corpus.positives()
    identical = {p for p, j in labelled.items() if j == 1.0}
    related = {p for p, j in labelled.items() if RELATED_J <= j < NEAR_DUP_J}
    true_positives = len(found & positives)
    false_positives = len(found) - true_positives
    related_found = len(found & related)
    precision = true_positives / len(found) if found else 1.0
    recall = true_positives / len(positives)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    lenient_found = len(found) - related_found
    return Scores(
        found=len(found),
        true_positives=true_positives,
        false_positives=false_positives,
        related_found=related_found,
        positives=len(positives),
        precision=precision,
        recall=recall,
        f1=f1,
        lenient_precision=true_positives / lenient_found if lenient_found else 1.0,
        identical=len(identical),
        identical_found=len(found & identical),
        related=len(related),
        related_recall=related_found / len(related) if related else 1.0,
    )


def clusters_kept_whole(cluster_of: dict[str, str], corpus: Corpus) -> list[bool]:
    """Per labelled J >= 0.8 cluster: did all its members get one cluster_id?"""
    return [
        all(member in cluster_of for member in members)
        and len({cluster_of[member] for member in members}) == 1
        for members in corpus.clusters
    ]


def normalized_identical_pairs(corpus: Corpus) -> set[Pair]:
    """Labelled identical pairs (J = 1.0) whose normalised texts are equal."""
    return {
        (a, b)
        for (a, b), j in corpus.labelled.items()
        if j == 1.0 and normalize(corpus.texts[a]) == normalize(corpus.texts[b])
    }


# ---------------------------------------------------------------------------- examples


@dataclass(frozen=True, slots=True)
class Example:
    earlier: str
    later: str
    labelled_j: float | None  # None: not labelled, so J < 0.5
    similarity: float
    hamming: int
    methods: str  # how the service matched it, or why it did not
    own_jaccard: float  # exact Jaccard of the default shingles the service hashes
    titles: tuple[str, str]
    lengths: tuple[int, int]  # normalised characters


@cache
def shingle_set(text: str, unit: ShingleUnit, size: int) -> frozenset[int]:
    """The distinct 64-bit shingle hashes the service makes of a text with these shingles."""
    hashes = shingle_hashes(normalize(text), FingerprintParams(unit=unit, size=size))
    return frozenset(hashes.tolist())


def exact_jaccard(a: str, b: str, shingle: ShingleConfig = DEFAULTS.shingle) -> float:
    """Exact Jaccard of two texts' shingle sets: what MinHash estimates."""
    sa = shingle_set(a, shingle.unit, shingle.size)
    sb = shingle_set(b, shingle.unit, shingle.size)
    return len(sa & sb) / len(sa | sb)


def order_of(corpus: Corpus) -> dict[str, int]:
    return {story_id: position for position, story_id in enumerate(corpus.ids)}


def missed_example(
    client: HttpClient, corpus: Corpus, p: Pair, replay: Replay, position: dict[str, int]
) -> Example:
    """A missed positive, with its similarity from GET .../similar (or computed here)."""
    earlier, later = sorted(p, key=position.__getitem__)
    response = client.get(
        f"/v1/collections/{COLLECTION}/documents/{later}/similar",
        params={"limit": SIMILAR_LIMIT, "min_similarity": 0.0},
    )
    response.raise_for_status()
    # A match by its shared passages alone is not an LSH candidate.
    listed = [
        m
        for m in response.json()["matches"]
        if m["id"] == earlier and set(m["methods"]) - {"passage"}
    ]
    texts = corpus.texts
    if listed:
        similarity, hamming = listed[0]["similarity"], listed[0]["hamming_distance"]
        how = f"LSH candidate below {LSH_THRESHOLD}"
        if later in replay.capped:
            how = f"cut by the {INSERT_MATCH_LIMIT}-match cap"
    else:
        # Not even an LSH candidate: the same fingerprints, computed here.
        fp = fingerprint([texts[earlier], texts[later]], SERVICE_PARAMS)
        similarity = float(jaccard_estimate(fp.minhash[1], fp.minhash[:1])[0])
        hamming = int(hamming_distance(fp.simhash[1], fp.simhash[:1])[0])
        how = "not an LSH candidate"
    return _example(corpus, earlier, later, similarity, hamming, how)


def _example(
    corpus: Corpus, earlier: str, later: str, similarity: float, hamming: int, how: str
) -> Example:
    texts = corpus.texts
    return Example(
        earlier=earlier,
        later=later,
        labelled_j=corpus.labelled.get(pair(earlier, later)),
        similarity=similarity,
        hamming=hamming,
        methods=how,
        own_jaccard=exact_jaccard(texts[earlier], texts[later]),
        titles=(first_line(texts[earlier]), first_line(texts[later])),
        lengths=(len(normalize(texts[earlier])), len(normalize(texts[later]))),
    )


def first_line(text: str) -> str:
    """The title, or the first line of the body for the stories without one."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def false_positive_example(
    corpus: Corpus, p: Pair, match: FoundMatch, position: dict[str, int]
) -> Example:
    earlier, later = sorted(p, key=position.__getitem__)
    return _example(
        corpus, earlier, later, match.similarity, match.hamming_distance, "+".join(match.methods)
    )


FP_KINDS = (
    "without MinHash (n-gram, SimHash)",
    "MinHash, not labelled (J < 0.5)",
    "MinHash, labelled J in [0.5, 0.8)",
)


def false_positive_kind(p: Pair, match: FoundMatch, corpus: Corpus) -> str:
    if "minhash" not in match.methods and "exact" not in match.methods:
        return FP_KINDS[0]
    return FP_KINDS[1] if p not in corpus.labelled else FP_KINDS[2]


def false_positives_by_kind(corpus: Corpus, replay: Replay) -> dict[str, list[Pair]]:
    """The false positives of each kind, most telling first: the lowest estimate for the
    SimHash-only ones, the highest for the others."""
    positives = corpus.positives()
    kinds: dict[str, list[Pair]] = {kind: [] for kind in FP_KINDS}
    for p, match in replay.found.items():
        if p not in positives:
            kinds[false_positive_kind(p, match, corpus)].append(p)
    for kind, pairs in kinds.items():
        sign = 1 if kind == FP_KINDS[0] else -1
        pairs.sort(key=lambda p: (sign * replay.found[p].similarity, p))
    return kinds


def examples_per_kind(kinds_present: int) -> int:
    """False positives shown per kind: EXAMPLES shared by the kinds that have any."""
    return EXAMPLES // max(1, kinds_present)


def pick_examples(
    client: HttpClient, corpus: Corpus, replay: Replay
) -> tuple[list[Example], list[Example]]:
    """(missed positives, false positives): every missed positive, the highest labelled J
    first; a few false positives of each kind, each story in one example at most."""
    position = order_of(corpus)
    positives = corpus.positives()
    missed = sorted(positives - set(replay.found), key=lambda p: (-corpus.labelled[p], p))
    by_kind = false_positives_by_kind(corpus, replay)
    per_kind = examples_per_kind(sum(bool(pairs) for pairs in by_kind.values()))
    wrong: list[Pair] = []
    for pairs in by_kind.values():
        seen: set[str] = set()  # one example per story, so the examples differ
        for p in pairs:
            if len(seen) == 2 * per_kind:
                break
            if not seen.intersection(p):
                wrong.append(p)
                seen.update(p)
    return (
        [missed_example(client, corpus, p, replay, position) for p in missed],
        [false_positive_example(corpus, p, replay.found[p], position) for p in wrong],
    )


def fp_kind_table(corpus: Corpus, replay: Replay) -> list[list[str]]:
    """Rows: kind, count, how many have an exact Jaccard of the default shingles at or
    above the threshold, estimate range."""
    rows = []
    texts = corpus.texts
    for kind, pairs in false_positives_by_kind(corpus, replay).items():
        high = sum(exact_jaccard(texts[a], texts[b]) >= LSH_THRESHOLD for a, b in pairs)
        estimates = [replay.found[p].similarity for p in pairs]
        spread = f"{min(estimates):.3f}-{max(estimates):.3f}" if estimates else ""
        rows.append([kind, str(len(pairs)), str(high), spread])
    return rows


def example_table(examples: Sequence[Example]) -> str:
    rows = [
        [
            f"{e.earlier} → {e.later}",
            "< 0.5" if e.labelled_j is None else f"{e.labelled_j:.3f}",
            f"{e.own_jaccard:.3f}",
            f"{e.similarity:.3f}",
            str(e.hamming),
            e.methods,
            f"{e.lengths[0]} / {e.lengths[1]}",
            _short(e.titles[0]) + (" (same title)" if e.titles[0] == e.titles[1] else ""),
        ]
        for e in examples
    ]
    headers = [
        "pair (earlier → later)",
        "labelled J",
        f"{OWN} J",
        "est. J",
        "Hamming",
        "matched by / why missed",
        "chars",
        "title (earlier)",
    ]
    align: list[Literal["left", "right"]] = [
        "left", "right", "right", "right", "right", "left", "right", "left",
    ]  # fmt: skip
    return markdown_table(headers, rows, align)


def _short(title: str, width: int = 48) -> str:
    title = " ".join(title.split()).replace("|", "/")
    return title if len(title) <= width else title[: width - 1] + "…"


# ---------------------------------------------------------------------------- running


@contextmanager
def asgi_client() -> Iterator[HttpClient]:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    with tempfile.TemporaryDirectory() as directory:
        app = create_app(Settings(data_dir=Path(directory) / "data"))
        with TestClient(app) as client:
            if not app.state.ready.wait(60):
                raise RuntimeError(f"app not ready: {app.state.startup_error}")
            yield client


@contextmanager
def process_client() -> Iterator[HttpClient]:
    from devkit.server import Server

    with (
        tempfile.TemporaryDirectory() as directory,
        Server(Path(directory) / "data", NEARDUP_LOG_LEVEL="warning") as server,
        httpx.Client(base_url=server.url, timeout=120) as client,
    ):
        yield client
        if server.stop() != 0:
            raise RuntimeError(f"server did not exit cleanly: {server.output()}")


def warm_up(client: HttpClient) -> None:
    """Compile or load every kernel on a throw-away collection before timing."""
    create_collection(client, "warm-up")
    text = "Oil prices rose sharply after OPEC ministers agreed to cut output, traders said."
    for suffix in range(3):
        documents = [{"text": f"{text} {suffix} {i}"} for i in range(BATCH_SIZE)]
        response = client.post(
            "/v1/collections/warm-up/documents/batch", json={"documents": documents}
        )
        response.raise_for_status()
    client.get("/v1/collections/warm-up/documents/missing/similar")


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    settings: str  # the collection settings, JSON
    scores: Scores
    clusters_whole: int


@dataclass(frozen=True, slots=True)
class Oracle:
    shingle: str  # e.g. "word-5"
    threshold: float
    scores: Scores


def oracles(corpus: Corpus, candidates: set[Pair]) -> list[Oracle]:
    """Per setting and threshold t of ORACLES: the candidates whose exact Jaccard of those
    shingles is at least t, scored. The candidates hold every labelled pair and every pair
    an LSH at 0.8 found, so at t >= 0.8 they miss few pairs a full search would add."""
    texts = corpus.texts
    out = []
    for shingle, thresholds in ORACLES:
        jaccard = {(a, b): exact_jaccard(texts[a], texts[b], shingle) for a, b in candidates}
        for t in thresholds:
            found = {p for p, j in jaccard.items() if j >= t}
            out.append(Oracle(shingle_short(shingle), t, score(found, corpus)))
    return out


@dataclass(frozen=True, slots=True)
class Peer:
    shingle: str  # e.g. "word-5"
    scores: Scores
    bands: int
    rows: int
    docs_per_second: float
    missed_service_found: int  # positives the service found and this peer did not
    found_service_missed: int  # positives this peer found and the service did not


@dataclass(frozen=True, slots=True)
class Report:
    mode: Mode
    defaults: dict[str, Any]  # the MATCHING_SETTINGS of CollectionConfig(): what ran
    bands: tuple[int, int]  # the service's LSH (b, r) at the default threshold
    corpus_total: int
    replayed: int
    skipped: list[str]
    service: Scores
    peer: Peer  # datasketch on the default shingles
    former_peer: Peer  # datasketch on the former default's
    variants: list[Variant]
    oracles: list[Oracle]
    candidates: int  # pairs the oracle was computed on
    label_agreement: int  # labelled pairs whose exact default-shingle Jaccard is the label's
    simhash_matches: int  # found pairs SimHash matched
    simhash_alone: int  # found pairs only SimHash matched
    service_clusters: int  # service clusters of two or more documents
    service_docs_per_second: float
    batches: int
    capped: int
    capped_missed: int  # missed positives whose later story's result hit the cap
    clusters: int
    clusters_whole: int
    split_clusters: list[list[str]]
    get_mismatches: int  # cluster members whose GET cluster_id differed from the insert's
    identical_equal_text: int
    identical_equal_text_found: int
    fp_kinds: list[list[str]]
    missed_examples: list[Example]  # every missed positive, the highest labelled J first
    false_examples: list[Example]
    false_positives: list[Example]  # every false positive, for the observations
    machine: str
    when: str


def run(mode: Mode) -> Report:
    corpus = load_corpus()
    if corpus is None:
        sys.exit(f"{DATA_DIR} not found: this benchmark needs the shared Reuters data set")
    opener = asgi_client if mode == "asgi" else process_client
    with opener() as client:
        warm_up(client)
        replay = replay_http(client, corpus)
        variant_replays = [
            replay_http(client, corpus, f"variant-{i}", settings=settings)
            for i, (_, settings) in enumerate(VARIANTS)
        ]
        missed_examples, false_examples = pick_examples(client, corpus, replay)
        mismatches = 0
        for members in corpus.clusters:
            for member in members:
                got = client.get(f"/v1/collections/{COLLECTION}/documents/{member}")
                got.raise_for_status()
                mismatches += got.json()["cluster_id"] != replay.cluster_of[member]
    found = set(replay.found)
    service = score(found, corpus)
    peers = [replay_datasketch(corpus, shingle) for shingle in (DEFAULTS.shingle, FORMER_SHINGLE)]
    whole = clusters_kept_whole(replay.cluster_of, corpus)
    variants = [
        Variant(
            name,
            json.dumps(settings, separators=(",", ":")),
            score(set(v.found), corpus),
            sum(clusters_kept_whole(v.cluster_of, corpus)),
        )
        for (name, settings), v in zip(VARIANTS, variant_replays, strict=True)
    ]
    candidates = set(corpus.labelled) | found
    for run_found in [peer.found for peer in peers] + [set(v.found) for v in variant_replays]:
        candidates |= run_found
    sizes = Counter(replay.cluster_of.values())
    capped = set(replay.capped)
    position = order_of(corpus)
    missed = corpus.positives() - found
    equal_text = normalized_identical_pairs(corpus)
    wrong = sorted(found - corpus.positives())
    methods = [match.methods for match in replay.found.values()]
    positives = corpus.positives()
    peer, former_peer = (
        Peer(
            shingle_short(shingle),
            score(run.found, corpus),
            run.bands,
            run.rows,
            len(corpus.ids) / run.seconds,
            len((found - run.found) & positives),
            len((run.found - found) & positives),
        )
        for shingle, run in zip((DEFAULTS.shingle, FORMER_SHINGLE), peers, strict=True)
    )
    texts = corpus.texts
    label_agreement = sum(
        abs(exact_jaccard(texts[a], texts[b]) - j) <= LABEL_ROUNDING
        for (a, b), j in corpus.labelled.items()
    )
    return Report(
        mode=mode,
        defaults={key: DEFAULTS.to_dict()[key] for key in MATCHING_SETTINGS},
        bands=optimal_bands(LSH_THRESHOLD, NUM_PERM),
        corpus_total=corpus.total,
        replayed=replay.documents,
        skipped=corpus.skipped,
        service=service,
        peer=peer,
        former_peer=former_peer,
        variants=variants,
        oracles=oracles(corpus, candidates),
        candidates=len(candidates),
        label_agreement=label_agreement,
        simhash_matches=sum("simhash" in m for m in methods),
        simhash_alone=sum(m == ("simhash",) for m in methods),
        service_clusters=sum(size >= 2 for size in sizes.values()),
        service_docs_per_second=replay.documents / replay.seconds,
        batches=replay.batches,
        capped=len(capped),
        capped_missed=sum(max(p, key=position.__getitem__) in capped for p in missed),
        clusters=len(whole),
        clusters_whole=sum(whole),
        split_clusters=[m for m, ok in zip(corpus.clusters, whole, strict=True) if not ok],
        get_mismatches=mismatches,
        identical_equal_text=len(equal_text),
        identical_equal_text_found=len(equal_text & found),
        fp_kinds=fp_kind_table(corpus, replay),
        missed_examples=missed_examples,
        false_examples=false_examples,
        false_positives=[
            false_positive_example(corpus, p, replay.found[p], position) for p in wrong
        ],
        machine=_machine(),
        when=datetime.now(UTC).strftime("%Y-%m-%d"),
    )


def _machine() -> str:
    return f"{cpu_model_name()}, {os.cpu_count()} CPUs; Python {sys.version.split()[0]}"


# ---------------------------------------------------------------------------- report


def fraction(value: float) -> str:
    return f"{value:.4f}"


def span(values: Sequence[float]) -> str:
    """The range of some values to three decimals, e.g. 0.800-0.835."""
    if not values:
        return "none"
    low, high = min(values), max(values)
    return f"{low:.3f}" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f}-{high:.3f}"


def peer_name(peer: Peer) -> str:
    return f"datasketch MinHashLSH, {peer.shingle}"


def scores_table(report: Report) -> str:
    s, d = report.service, report.peer.scores

    def count(found: int, total: int) -> str:
        return f"{found / total:.4f} ({found}/{total})"

    rows = [
        ["pairs found", str(s.found), str(d.found)],
        ["true positives (labelled J >= 0.8)", str(s.true_positives), str(d.true_positives)],
        ["false positives", str(s.false_positives), str(d.false_positives)],
        ["… of which labelled J in [0.5, 0.8)", str(s.related_found), str(d.related_found)],
        ["precision", fraction(s.precision), fraction(d.precision)],
        ["lenient precision", fraction(s.lenient_precision), fraction(d.lenient_precision)],
        ["recall (J >= 0.8)", fraction(s.recall), fraction(d.recall)],
        ["**F1**", f"**{fraction(s.f1)}**", f"**{fraction(d.f1)}**"],
        [
            "recall, identical (J = 1.0)",
            count(s.identical_found, s.identical),
            count(d.identical_found, d.identical),
        ],
        [
            "recall, related (J in [0.5, 0.8))",
            count(s.related_found, s.related),
            count(d.related_found, d.related),
        ],
        [
            "labelled clusters kept whole",
            count(report.clusters_whole, report.clusters),
            "n/a (no clusters)",
        ],
        [
            "documents per second",
            f"{report.service_docs_per_second:,.0f} (HTTP, {report.mode})",
            f"{report.peer.docs_per_second:,.0f} (in process)",
        ],
    ]
    headers = ["", "neardup over HTTP", f"datasketch MinHashLSH, same shingles ({OWN})"]
    return markdown_table(headers, rows, ["left", "right", "right"])


def variants_table(report: Report) -> str:
    def row(name: str, s: Scores, whole: int | None) -> list[str]:
        return [
            name,
            str(s.found),
            str(s.false_positives),
            fraction(s.precision),
            fraction(s.lenient_precision),
            fraction(s.recall),
            fraction(s.f1),
            f"{s.identical_found}/{s.identical}",
            fraction(s.related_recall),
            "" if whole is None else f"{whole}/{report.clusters}",
        ]

    rows = [
        row(f"neardup, defaults ({OWN})", report.service, report.clusters_whole),
        *(row(f"neardup, {v.name}", v.scores, v.clusters_whole) for v in report.variants),
        *(row(peer_name(p), p.scores, None) for p in (report.peer, report.former_peer)),
        *(
            row(f"exact {o.shingle} J >= {o.threshold} (candidates)", o.scores, None)
            for o in report.oracles
        ),
    ]
    headers = [
        "",
        "found",
        "FP",
        "precision",
        "lenient P",
        "recall",
        "F1",
        "J = 1.0",
        "recall [0.5, 0.8)",
        "clusters whole",
    ]
    align: list[Literal["left", "right"]] = ["left"]
    align += ["right"] * (len(headers) - 1)
    return markdown_table(headers, rows, align)


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def quality(data: dict[str, Any]) -> dict[str, Any]:
    """The figures of a saved or current report that must not depend on the mode."""
    keys = ("service", "clusters_whole", "variants", "label_agreement", "fp_kinds")
    return {key: data.get(key) for key in keys}


def modes_section(report: Report) -> str:
    """Both modes' quality figures: this run's, and the other mode's last saved run."""
    other: Mode = "process" if report.mode == "asgi" else "asgi"
    path = REPO_ROOT / "bench" / "results" / f"reuters_http-{other}.json"
    current = asdict(report)
    runs = [(report.mode, current)]
    if not path.is_file():
        note = f"The `{other}` mode has not been run on this machine yet."
    else:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("defaults") != current["defaults"]:
            note = (
                f"The last `--mode {other}` run ({saved['when']}) was made with other "
                f"default settings than these; run `--mode {other}` again to compare."
            )
        else:
            runs.append((other, saved))
            note = (
                "Both modes give identical quality figures (pairs found, scores, clusters, "
                "variants), as they should: the same application answers the same requests "
                "in the same order, and only the transport differs."
                if quality(saved) == quality(current)
                else "**The two modes' quality figures differ**: the same requests in the "
                "same order should give the same answers, so this is a bug to look into "
                "(compare bench/results/reuters_http-asgi.json and -process.json)."
            )
    rows = []
    for mode, data in sorted(runs):
        s = data["service"]
        rows.append(
            [
                f"`{mode}`",
                data["when"],
                str(s["found"]),
                str(s["true_positives"]),
                fraction(s["precision"]),
                fraction(s["recall"]),
                fraction(s["f1"]),
                f"{s['identical_found']}/{s['identical']}",
                f"{data['clusters_whole']}/{data['clusters']}",
                f"{data['service_docs_per_second']:,.0f}",
            ]
        )
    headers = [
        "mode",
        "run",
        "found",
        "TP",
        "precision",
        "recall",
        "F1",
        "J = 1.0",
        "clusters whole",
        "documents per second",
    ]
    align: list[Literal["left", "right"]] = ["left", "left"]
    align += ["right"] * (len(headers) - 2)
    return markdown_table(headers, rows, align) + "\n\n" + note


def describe_defaults(report: Report) -> str:
    d = report.defaults
    b, r = report.bands
    shingle = ShingleConfig(**d["shingle"])
    simhash = (
        f"SimHash over the distinct shingles with k = {d['simhash']['max_distance']}"
        if d["simhash"]["enabled"]
        else "no SimHash"
    )
    minhash = (
        f"MinHash {d['minhash']['num_perm']} with LSH at {d['minhash']['threshold']} "
        f"({b} bands of {r} rows; candidates within {UNCERTAIN} of the threshold decided "
        "by the exact Jaccard of their shingles, the texts being kept)"
        if d["minhash"]["enabled"]
        else "no MinHash"
    )
    return f"{shingle_name(shingle)}, {simhash}, {minhash}, exact hash"


def peer_feed(shingle: ShingleConfig) -> str:
    """How datasketch is fed these shingles (see datasketch_shingles)."""
    if shingle.unit == "word":
        return (
            f"the service's own {shingle_name(shingle)}: the 64-bit hashes of "
            "`app.core.fingerprint.shingle_hashes(normalize(text), "
            f'FingerprintParams(unit="{shingle.unit}", size={shingle.size}))`, 8 bytes '
            "each, so both see exactly the same shingle sets (same tokens, same n-grams)"
        )
    return (
        f"the UTF-8 {shingle_name(shingle)} `s[i:i+{shingle.size}]` of "
        "`s = app.core.text.normalize(text)`"
    )


def render(report: Report) -> str:
    s, d = report.service, report.peer.scores
    skipped = ", ".join(report.skipped) or "none"
    transport = (
        "in process through Starlette's `TestClient` (ASGI, no sockets)"
        if report.mode == "asgi"
        else "to the real `neardup serve` process (devkit/server.py) with httpx over 127.0.0.1"
    )
    split = "; ".join(", ".join(members) for members in report.split_clusters[:EXAMPLES])
    labelled = s.positives + s.related
    per_kind = examples_per_kind(sum(int(row[1]) > 0 for row in report.fp_kinds))
    targets = [
        f"- F1 >= {TARGET_F1}: {fraction(s.f1)}, {verdict(s.f1 >= TARGET_F1)}.",
        f"- Every labelled identical pair found: {s.identical_found} of {s.identical}, "
        f"{verdict(s.identical_found == s.identical)}. Of the {report.identical_equal_text} "
        "whose normalised texts are equal, "
        f"{report.identical_equal_text_found} found.",
        f"- F1 above datasketch's on the same shingles: {fraction(s.f1)} against "
        f"{fraction(d.f1)}, {verdict(s.f1 > d.f1)}.",
    ]
    return "\n".join(
        [
            "# Reuters-21578 through the HTTP API",
            "",
            "Generated by `bench/reuters_http.py` "
            f"(`--mode {report.mode}`, {report.when}); do not edit by hand. The quality "
            "figures are deterministic; the speeds are one run's, for information.",
            "",
            "## Method",
            "",
            f"- **Data.** Reuters-21578, {report.corpus_total:,} stories, replayed in `date` "
            "order (ties in story id order). A story's text is its title, a newline and its "
            "body. Every story is sent, in batches as they come; stories refused at their "
            f"position in the batch because that is empty: {len(report.skipped)} "
            f"(id {skipped}), the rest of their batch stored. Replayed: {report.replayed:,}.",
            f"- **Service.** A fresh collection `{COLLECTION}` with the default settings "
            f"(`CollectionConfig()`, app/collection_config.py: {describe_defaults(report)}), "
            f"sent {transport}. The stories go in {report.batches} batches of {BATCH_SIZE} "
            "through `POST /v1/collections/reuters/documents/batch`, each with its story id as "
            'document id and `"on_duplicate": "insert"`. A result\'s `matches` are the '
            "earlier documents (earlier ones of its batch included) the service calls "
            "near-duplicates; every (match, story) is a found pair.",
            f"- **Match cap.** An insert answers with at most {INSERT_MATCH_LIMIT} matches. "
            f"{report.capped} results held {INSERT_MATCH_LIMIT}; {report.capped_missed} of the "
            "missed labelled pairs have their later story among them.",
            f"- **Peer.** What a user would write instead: datasketch `MinHashLSH(threshold="
            f"{LSH_THRESHOLD}, num_perm={NUM_PERM})` (which picks b = {report.peer.bands} "
            f"bands of r = {report.peer.rows} rows), each story's `MinHash(num_perm="
            f"{NUM_PERM})` fed with `update_batch` of {peer_feed(DEFAULTS.shingle)}; in the "
            "same order: query, then insert. Its found pairs are the query results (LSH "
            "candidates, not verified). For reference, the same peer fed "
            f"{peer_feed(FORMER_SHINGLE)} (the former default's shingles) is in the table "
            "of other settings.",
            "- **Labels.** `reuters21578.near_dup_pairs.tsv`: exact Jaccard of word 5-grams. "
            f"Positives: the {s.positives} pairs with J >= 0.8 ({s.identical} of them J = 1.0); "
            f"related: the {s.related} pairs with J in [0.5, 0.8). Precision = true positives "
            "/ pairs found; recall = true positives / positives. *Lenient precision* leaves "
            "the related pairs found out of the count altogether (neither true nor false "
            "positives): true positives / (pairs found - related pairs found). The exact "
            f"Jaccard of the service's {shingle_name(DEFAULTS.shingle)} equals the labelled "
            f"J (to its four decimals) for {report.label_agreement} of the {labelled} "
            "labelled pairs.",
            f"- **Clusters.** Each of the {report.clusters} connected components of the "
            "positives (`reuters21578.clusters_j0.8.jsonl`) is *kept whole* when all its "
            "members got the same `cluster_id`. The cluster_id of every member read back "
            "with `GET /v1/collections/reuters/documents/{id}` agreed with the insert's in "
            f"all but {report.get_mismatches} cases.",
            f"- **Machine.** {report.machine}. No core pinning; the peer runs in this process.",
            "",
            "## Results",
            "",
            scores_table(report),
            "",
            "The service formed "
            f"{report.service_clusters} clusters of two or more documents (the labels have "
            f"{report.clusters}).",
            "",
            "### Both modes",
            "",
            modes_section(report),
            "",
            "### Where the errors come from",
            "",
            "The same replay through the same API into collections with other settings "
            "(" + "; ".join(f"{v.name}: `{v.settings}`" for v in report.variants) + "), "
            "datasketch on both shingle settings, and the exact Jaccard of the default "
            f"shingles ({OWN}) and of the former default's ({FORMER}) at a few thresholds "
            "(the shingles without MinHash error), computed on the "
            f"{report.candidates:,} candidate pairs: every labelled pair and every pair any "
            "of the replays found. Pairs outside them are not looked at, so their precision "
            "is an upper bound, a close one at thresholds of 0.8 and above:",
            "",
            variants_table(report),
            "",
            "## Against the targets",
            "",
            *targets,
            "",
            why_in_short(report),
            "",
            "## Misses and false positives",
            "",
            f'"{OWN} J" is the exact Jaccard of the {shingle_name(DEFAULTS.shingle)} the '
            'service hashes; "est. J" and "Hamming" are the service\'s MinHash estimate '
            "and SimHash distance: for a found pair from the insert's answer, for a missed "
            f"one from `GET …/documents/{{later}}/similar?limit={SIMILAR_LIMIT}"
            "&min_similarity=0` when it lists the pair (an LSH candidate), else computed "
            "with the same fingerprints.",
            "",
            f"Missed positives ({s.positives - s.true_positives}), the highest labelled J first:",
            "",
            example_table(report.missed_examples),
            "",
            f"False positives ({s.false_positives}) by kind:",
            "",
            markdown_table(
                ["kind", "pairs", f"{OWN} J >= {LSH_THRESHOLD}", "est. J"],
                report.fp_kinds,
                ["left", "right", "right", "right"],
            ),
            "",
            f"Up to {per_kind} of each kind present, one example per story, the "
            "SimHash-only ones with the lowest estimate, the others with the highest:",
            "",
            example_table(report.false_examples),
            "",
            f"Labelled clusters split ({report.clusters - report.clusters_whole}): "
            f"{split or 'none'}{' …' if len(report.split_clusters) > EXAMPLES else ''}.",
            "",
            observations(report),
            "",
        ]
    )


def own_oracle(report: Report) -> Oracle:
    return next(o for o in report.oracles if o.shingle == OWN and o.threshold == LSH_THRESHOLD)


def why_in_short(report: Report) -> str:
    misses, wrong = report.missed_examples, report.false_positives
    oracle = own_oracle(report).scores
    estimation = all(e.own_jaccard >= LSH_THRESHOLD > e.similarity for e in misses) and all(
        e.own_jaccard < LSH_THRESHOLD <= e.similarity for e in wrong
    )
    if not estimation:
        return (
            "Why, in short: not every error is MinHash estimation error around the "
            "threshold; see the misses, false positives and observations below."
        )
    return (
        f"Why, in short: the default shingles ({shingle_name(DEFAULTS.shingle)}) measure what "
        f"the labels measure (the exact {OWN} Jaccard at {LSH_THRESHOLD} scores F1 "
        f"{fraction(oracle.f1)} on the candidates), so every error left is MinHash "
        f"estimation error at the threshold: the {len(misses)} misses have an exact J of "
        f"{span([e.own_jaccard for e in misses])} and an estimate of "
        f"{span([e.similarity for e in misses])}, the {len(wrong)} false positives an exact "
        f"J of {span([e.own_jaccard for e in wrong])} and an estimate of "
        f"{span([e.similarity for e in wrong])}. {simhash_effect(report)}"
    )


def simhash_effect(report: Report) -> str:
    s = report.service
    without = next(v.scores for v in report.variants if v.name == WITHOUT_SIMHASH)
    if without == s:
        return "SimHash changes nothing on this corpus: without it the figures are the same."
    return (
        f"Without SimHash F1 is {fraction(without.f1)} (recall {fraction(without.recall)}) "
        f"against {fraction(s.f1)} (recall {fraction(s.recall)})."
    )


# Notes on the stories of the examples, written from the run that first listed them; a
# note is shown only while its pair is among the run's misses or false positives. True:
# one story edited or re-issued; False: the same template with other figures.
MISS_NOTES: dict[Pair, tuple[str, bool]] = {
    ("18928", "18939"): (
        're-headlines a World Bank loan story ("97.4 MLN DLR" out, "FOR FERTILIZER" in)',
        True,
    ),
    ("9770", "9821"): ("drops the last two sentences of a U.K. trade report", True),
    ("6045", "6080"): (
        'rewords the headline and one sentence ("is undertaking a review of" / "will review")',
        True,
    ),
    ("13697", "16236"): ("is another week's feeder steer prices", False),
    ("3131", "3133"): ("drops the tickers <LLOY.L> and <NWBL.L>", True),
    ("4809", "5394"): ("drops a long paragraph of an economic feature on the EMS", True),
    ("3128", "3133"): ("drops the same tickers and the REUTER sign-off", True),
    ("6046", "7769"): (
        'is another day\'s Fed bulletin with another amount ("two" / "1.5" billion dlrs)',
        False,
    ),
    ("12709", "12720"): ("drops a paragraph of a USDA acreage analysis", True),
}
FALSE_POSITIVE_NOTES: dict[Pair, tuple[str, bool]] = {
    ("10969", "10994"): (
        'City Resources\' sale re-headlined, "prefeasibility" made "feasibility"',
        True,
    ),
    ("10936", "10995"): ("a West African central bank story re-headlined, a sentence cut", True),
    ("12053", "12339"): ("Deak's purchase of Johnson Matthey re-headlined, lightly edited", True),
    ("505", "550"): (
        'a correction re-issued ("CORRECTED - BANKAMERICA ...", the year of a loss corrected)',
        True,
    ),
    ("10662", "10811"): ("a Peru gold find re-headlined", True),
    ("9096", "9248"): ("Brazil's new planning minister, re-cased with an apposition dropped", True),
    ("13638", "14221"): ("the London seeds quotes at 13:30 and at the close", True),
}
# A template story of the Fed: the same 335 characters with other figures. Another amount
# in the first pair, another Fed funds rate in the second.
FED_TITLE = "FED ADDS RESERVES VIA CUSTOMER REPURCHASES"
FED_AMOUNT: Pair = ("6046", "7769")
FED_RATE: Pair = ("10864", "6046")


def notes(
    examples: Sequence[Example], notes_by_pair: dict[Pair, tuple[str, bool]]
) -> tuple[str, int, int]:
    """(the notes of the examples that have one, how many are one story, how many a
    template with other figures)."""
    pairs = [(e, pair(e.earlier, e.later)) for e in examples]
    noted = [(e, notes_by_pair[p]) for e, p in pairs if p in notes_by_pair]
    text = "; ".join(f"{e.earlier} → {e.later} {note}" for e, (note, _) in noted)
    same_story = sum(one for _, (_, one) in noted)
    return text, same_story, len(noted) - same_story


def observations(report: Report) -> str:
    """What the errors are. The figures come from the run; the descriptions of the
    example stories (MISS_NOTES, FALSE_POSITIVE_NOTES) from the run that first listed them."""
    s, peer, former_peer = report.service, report.peer, report.former_peer
    variants = {v.name: v.scores for v in report.variants}
    no_simhash, former = variants[WITHOUT_SIMHASH], variants[FORMER_VARIANT]
    misses, wrong = report.missed_examples, report.false_positives
    min_matches = math.ceil(LSH_THRESHOLD * NUM_PERM - 1e-9)
    not_candidates = [e for e in misses if e.methods == "not an LSH candidate"]
    below = [e for e in misses if e.own_jaccard >= LSH_THRESHOLD > e.similarity]
    one_short = [e for e in misses if round(e.similarity * NUM_PERM) == min_matches - 1]
    b, r = report.bands
    service_p = float(candidate_probability(LSH_THRESHOLD, b, r))
    peer_p = float(candidate_probability(LSH_THRESHOLD, peer.bands, peer.rows))
    sd = math.sqrt(LSH_THRESHOLD * (1 - LSH_THRESHOLD) / NUM_PERM)
    kinds = {row[0]: int(row[1]) for row in report.fp_kinds}
    fed = [e for e in wrong if e.titles == (FED_TITLE, FED_TITLE)]
    former_oracle = [o for o in report.oracles if o.shingle == FORMER]
    best_former = max(former_oracle, key=lambda o: o.scores.f1)
    at_threshold = next(o for o in former_oracle if o.threshold == LSH_THRESHOLD)
    same_clusters = (
        "agreed with the insert's for every member"
        if report.get_mismatches == 0
        else f"**disagreed** with the insert's for {report.get_mismatches} members"
    )
    simhash_adds = (
        "on this corpus SimHash finds nothing that MinHash and the exact hash miss"
        if no_simhash.recall >= s.recall
        else f"SimHash adds {s.true_positives - no_simhash.true_positives} true positives"
    )
    candidates_text = (
        f"{len(not_candidates)} were not LSH candidates, but their full-signature "
        f"estimates ({span([e.similarity for e in not_candidates])}) are below "
        f"{LSH_THRESHOLD} too, so the banding ({b} bands of {r} rows, a candidate with "
        f"probability {service_p:.2f} at J = {LSH_THRESHOLD}) lost none"
        if not_candidates and all(e.similarity < LSH_THRESHOLD for e in not_candidates)
        else f"{len(not_candidates)} were not LSH candidates"
    )
    miss_notes, miss_stories, miss_templates = notes(misses, MISS_NOTES)
    others = [e for e in wrong if e.titles != (FED_TITLE, FED_TITLE)]
    wrong_notes, wrong_stories, _ = notes(others, FALSE_POSITIVE_NOTES)
    if wrong_notes and wrong_stories == len(others):
        wrong_text = f"The others are re-issues a reader would call the same story: {wrong_notes}."
    elif wrong_notes:
        wrong_text = f"Of the others: {wrong_notes}."
    else:
        wrong_text = ""
    kinds_of_misses = (
        f"{miss_stories} of these are one story edited or re-issued, near-duplicates to a "
        f"reader; {miss_templates} the same template with other figures."
        if miss_notes
        else ""
    )
    fed_text = ""
    if fed:
        fed_text = (
            f'{len(fed)} of them are the Fed\'s "{FED_TITLE}" bulletin, the same 335 '
            "characters with another Fed funds rate (6046 → 10864: "
            '"6-1/16" / "6-3/8", two tokens that break 6 of its 51 word 5-grams, J = 45/57 = '
            "0.789): a template with other figures, just under the line. "
            if FED_RATE in {pair(e.earlier, e.later) for e in fed}
            else f'{len(fed)} of them are the Fed\'s "{FED_TITLE}" bulletin with other figures. '
        )
    split_labels = ""
    missed_pairs = {pair(e.earlier, e.later): e for e in misses}
    wrong_pairs = {pair(e.earlier, e.later): e for e in wrong}
    if FED_AMOUNT in missed_pairs and FED_RATE in wrong_pairs:
        amount, rate = missed_pairs[FED_AMOUNT], wrong_pairs[FED_RATE]
        split_labels = (
            f" The Fed bulletins show it: with another amount ({amount.earlier} → "
            f"{amount.later}) they are labelled {amount.labelled_j:.3f}, a positive the "
            f"service misses; with another rate ({rate.earlier} → {rate.later}) "
            f"{rate.labelled_j:.3f}, a negative it finds."
        )
    text = f"""\
## Observations

- **Misses ({len(misses)}).** {len(below)} of the {len(misses)} have an exact {OWN} Jaccard
  at or above {LSH_THRESHOLD} ({span([e.own_jaccard for e in misses])}, the labelled value
  each time) and a MinHash estimate below it ({span([e.similarity for e in misses])}):
  estimation error with {NUM_PERM} values (standard deviation {sd:.3f} at J =
  {LSH_THRESHOLD}); {len(one_short)} of them are one agreeing value short
  ({min_matches - 1} of {NUM_PERM}, {min_matches} needed). {candidates_text}. An LSH
  candidate with an estimate within {UNCERTAIN} of the threshold is decided by its exact
  Jaccard, so what estimation error still costs is candidates: pairs that share no whole
  band of {r} values.
  {report.capped_missed} were cut by the match cap. The stories: {miss_notes or "none noted"}.
  {kinds_of_misses}
- **False positives ({len(wrong)}).** {kinds[FP_KINDS[0]]} were found without MinHash
  (the n-gram index of short texts, or SimHash), {kinds[FP_KINDS[2]]} by MinHash and
  labelled J in [0.5, 0.8), {kinds[FP_KINDS[1]]} by MinHash and unlabelled (J < 0.5); their
  exact {OWN} Jaccard is {span([e.own_jaccard for e in wrong])}. A MinHash candidate whose
  estimate is within {UNCERTAIN} of the threshold is decided by the exact Jaccard of its
  shingles (app/core/verify.py): only an estimate more than 4 standard deviations off
  could still make a MinHash false positive. {fed_text}{wrong_text}
  Lenient precision ({s.lenient_precision:.4f}) does not count them against the service.
- **SimHash ({report.simhash_matches} found pairs, {report.simhash_alone} by SimHash
  alone).** The service's SimHash counts each distinct shingle once
  (`app/core/_kernels.py: simhash64`), so a shingle repeated many times (the dot leaders
  of tables) no longer pulls unrelated texts together. Without SimHash, recall is
  {no_simhash.recall:.4f} (defaults: {s.recall:.4f}) and F1 {no_simhash.f1:.4f}
  (defaults: {s.f1:.4f}): {simhash_adds}.
- **The peer on the same shingles.** datasketch sees exactly the service's shingle sets,
  so the difference is the index: `MinHashLSH({LSH_THRESHOLD}, {NUM_PERM})` weighs false
  positives and negatives equally and picks {peer.bands} bands of {peer.rows} rows, which
  makes a pair at J = {LSH_THRESHOLD} a candidate with probability {peer_p:.2f} (the
  service's {b} × {r}: {service_p:.2f}), and it returns candidates unverified. It finds
  {peer.scores.true_positives} of the {s.positives} positives (recall
  {peer.scores.recall:.4f}): {peer.missed_service_found} that the service finds are not
  its candidates, and {peer.found_service_missed} it finds the service misses. Its
  {peer.scores.false_positives} false positives ({peer.scores.related_found} of them
  labelled J in [0.5, 0.8)) are band collisions it returns without checking the
  estimate.
- **The former default, {shingle_name(FORMER_SHINGLE)}.** In the same replay it reaches F1
  {former.f1:.4f} (precision {former.precision:.4f}, recall {former.recall:.4f},
  {former.identical_found} of {former.identical} identical pairs), and datasketch on the
  same shingles {former_peer.scores.f1:.4f}. Without MinHash error it would do little
  better: the exact {FORMER} Jaccard at {LSH_THRESHOLD} has F1 {at_threshold.scores.f1:.4f}
  (precision at most {at_threshold.scores.precision:.4f}) and the best threshold tried,
  {best_former.threshold}, {best_former.scores.f1:.4f}. A changed figure breaks the five word
  5-grams that hold it but only the character 5-grams that overlap it (its length plus
  four), so same-template stories with other figures (weekly Treasury bill sales, French
  T-bill rates, slaughter estimates) keep more than 0.8 of their character 5-grams while the
  labels put them below 0.5: {former.false_positives - former.related_found} of its
  {former.false_positives} false positives are unlabelled (J < 0.5), and
  {former.related_found} labelled J in [0.5, 0.8). That is why the defaults changed
  (docs/evaluation.md).
- **What the F1 measures.** The service's {shingle_name(DEFAULTS.shingle)} reproduce the
  labels' measure ({report.label_agreement} of the {s.positives + s.related} labelled pairs
  have the same exact Jaccard), so the F1 here is that of MinHash and LSH against the
  labelling rule, not of the rule itself. Whether the labels call the right pairs
  near-duplicates is another question: at the threshold they hinge on which figure
  changed.{split_labels}
- **Clusters.** {report.clusters - report.clusters_whole} labelled clusters are not kept
  whole ({s.positives - s.true_positives} pairs missed); the cluster_id read back with GET
  {same_clusters}. {report.capped} insert results held the
  {INSERT_MATCH_LIMIT}-match maximum."""
    return text.replace("\n  ", " ")  # one line per item, as in the rest of the report


def save(report: Report) -> Path:
    data = asdict(report)
    return write_result(f"reuters_http-{report.mode}.json", json.dumps(data, indent=1))


# ---------------------------------------------------------------------------- --window

WINDOW_OUTPUT_PATH = REPO_ROOT / "docs" / "evaluation-window.md"
WINDOWS = ("1h", "24h", "48h", "7d")
MAIN_WINDOW = "48h"
GAP_BOUNDS_HOURS = (1, 6, 24, 48, 168)
NO_NGRAM_BASE: tuple[str, dict[str, object], bool] = (
    "n-gram index off: no window",
    {"ngram": {"enabled": False}},
    True,
)


@dataclass(frozen=True, slots=True)
class WindowRow:
    name: str
    settings: str
    timestamps: bool
    scores: Scores
    lost: int  # positives the unwindowed replay found and this one did not
    gained: int  # false positives of the unwindowed replay this one did not make


@dataclass(frozen=True, slots=True)
class WindowReport:
    rows: list[WindowRow]
    gaps: list[tuple[str, int, int]]  # (within, positives, related pairs)
    positives: int
    related: int
    far_positives: list[tuple[str, str, float, float]]  # beyond 48 h: a, b, hours, J
    when: str


def hours_apart(corpus: Corpus, p: Pair) -> float:
    a, b = (datetime.fromisoformat(corpus.dates[i]) for i in p)
    return abs((a - b).total_seconds()) / 3600


def run_window(mode: str) -> WindowReport:
    corpus = load_corpus()
    if corpus is None:
        sys.exit(f"{DATA_DIR} not found: this benchmark needs the shared Reuters data set")
    opener = asgi_client if mode == "asgi" else process_client
    no_ngram = {"ngram": {"enabled": False}}
    runs: list[tuple[str, dict[str, object], bool]] = [
        ("no window, no timestamps", {}, False),
        ("no window, with timestamps", {}, True),
        *[(f"match_window {w}", {"match_window": w}, True) for w in WINDOWS],
        ("n-gram index off: no window", no_ngram, True),
        *[
            (f"n-gram index off: match_window {w}", {**no_ngram, "match_window": w}, True)
            for w in WINDOWS
        ],
    ]
    found: list[set[Pair]] = []
    with opener() as client:
        warm_up(client)
        for number, (_, settings, timestamps) in enumerate(runs):
            replay = replay_http(
                client,
                corpus,
                f"window-{number}",
                settings=settings,
                timestamps=corpus.dates if timestamps else None,
            )
            found.append(set(replay.found))
    positives = corpus.positives()
    rows = []
    for (name, settings, timestamps), pairs in zip(runs, found, strict=True):
        # Against the unwindowed replay with the same indexes.
        reference = found[runs.index(NO_NGRAM_BASE)] if "ngram" in settings else found[0]
        rows.append(
            WindowRow(
                name,
                json.dumps(settings, separators=(",", ":")) if settings else "{}",
                timestamps,
                score(pairs, corpus),
                len((reference - pairs) & positives),
                len((reference - positives) - pairs),
            )
        )
    related = {p for p, j in corpus.labelled.items() if j < 0.8}
    gaps = [
        (
            f"{bound} h",
            sum(hours_apart(corpus, p) <= bound for p in positives),
            sum(hours_apart(corpus, p) <= bound for p in related),
        )
        for bound in GAP_BOUNDS_HOURS
    ]
    far = sorted(
        (p[0], p[1], hours_apart(corpus, p), corpus.labelled[p])
        for p in positives
        if hours_apart(corpus, p) > 48
    )
    return WindowReport(
        rows,
        gaps,
        len(positives),
        len(related),
        far,
        datetime.now(UTC).strftime("%Y-%m-%d"),
    )


def render_window(report: WindowReport) -> str:
    table = markdown_table(
        [
            "replay",
            "precision",
            "recall",
            "F1",
            "found",
            "false positives",
            "related recall",
            "positives lost",
            "false positives avoided",
        ],
        [
            [
                row.name,
                f"{row.scores.precision:.4f}",
                f"{row.scores.recall:.4f}",
                f"{row.scores.f1:.4f}",
                f"{row.scores.found:,}",
                f"{row.scores.false_positives}",
                f"{row.scores.related_recall:.4f}",
                f"{row.lost}",
                f"{row.gained}",
            ]
            for row in report.rows
        ],
        ["left"] + ["right"] * 8,
    )
    gaps = markdown_table(
        ["stories apart", "positives (J >= 0.8)", "share", "related (0.5 <= J < 0.8)", "share"],
        [
            [
                within,
                f"{positives}",
                f"{positives / report.positives:.3f}",
                f"{related}",
                f"{related / report.related:.3f}",
            ]
            for within, positives, related in report.gaps
        ],
        ["left"] + ["right"] * 4,
    )
    far = (
        markdown_table(
            ["story", "story", "hours apart", "labelled J"],
            [[a, b, f"{hours:,.1f}", f"{j:.4f}"] for a, b, hours, j in report.far_positives],
            ["left", "left", "right", "right"],
        )
        if report.far_positives
        else "None."
    )
    main = next(r for r in report.rows if r.name == f"match_window {MAIN_WINDOW}")
    base = report.rows[0]
    plain = next(r for r in report.rows if r.name == NO_NGRAM_BASE[0])
    plain_main = next(
        r for r in report.rows if r.name == f"n-gram index off: match_window {MAIN_WINDOW}"
    )
    return f"""\
# Reuters-21578 by date, with a match window

Generated by `bench/reuters_http.py --window` on {report.when}. Every story of Reuters-21578 is
POSTed in `date` order, 256 to a batch, through the HTTP API (bench/reuters_http.py's
replay and scoring against the {report.positives} labelled near-duplicate pairs, J >= 0.8),
each with its own `date` as `timestamp` (read as UTC), into a collection with the default
settings and a `match_window`: a story matches only earlier stories published within the
window of it.

{table}

"positives lost": labelled near-duplicates the unwindowed replay with the same indexes
finds and this one does not; "false positives avoided": pairs found without a window, not
labelled J >= 0.8, that the window leaves out. Timestamps alone change nothing (second
row). With the n-gram index of short texts on (the default), most false positives are
title-only bulletins that it matches by their characters and the labels, by word
5-grams, do not; with it off the replay is that of docs/evaluation-http.md.

## How far apart the labelled pairs are

{gaps}

With `match_window` {MAIN_WINDOW} the service finds {main.scores.true_positives} of the
{report.positives} positives (recall {main.scores.recall:.4f}, unwindowed
{base.scores.recall:.4f}) at precision {main.scores.precision:.4f} (unwindowed
{base.scores.precision:.4f}): F1 {main.scores.f1:.4f} against {base.scores.f1:.4f}. With
the n-gram index off: recall {plain_main.scores.recall:.4f} against
{plain.scores.recall:.4f}, precision {plain_main.scores.precision:.4f} against
{plain.scores.precision:.4f}, F1 {plain_main.scores.f1:.4f} against {plain.scores.f1:.4f}.
The window keeps what the labels' time gaps allow: the positives found lost are those
published further apart. Labelled positives more than 48 hours apart (a window of 48 h
cannot find them):

{far}
"""


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["asgi", "process"], default="asgi")
    parser.add_argument(
        "--window",
        action="store_true",
        help="replay with each story's date as its timestamp, with and without match windows "
        "(docs/evaluation-window.md)",
    )
    args = parser.parse_args(argv)
    if args.window:
        window = run_window(args.mode)
        text = render_window(window)
        WINDOW_OUTPUT_PATH.write_text(text, encoding="utf-8")
        write_result("reuters_window.json", json.dumps(asdict(window), indent=1))
        print(text)
        print(f"written to {WINDOW_OUTPUT_PATH.relative_to(REPO_ROOT)}", file=sys.stderr)
        return
    report = run(args.mode)
    text = render(report)
    OUTPUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT_PATH.write_text(text, encoding="utf-8")
    save(report)
    print(text)
    print(f"written to {OUTPUT_PATH.relative_to(REPO_ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
