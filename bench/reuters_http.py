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
talks to it with httpx over 127.0.0.1. Writes the tables and figures to
bench/results/reuters_http-<mode>.md and prints them; docs/evaluation-http.md holds the
prose that reads them (and a copy of the tables of its last run).

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
which bounds what a window can keep. Writes bench/results/reuters_window.md (and
reuters_window.json) and prints it, the tables of docs/evaluation-window.md; the figures
are deterministic.
"""

from __future__ import annotations

import argparse
import csv
import json
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
from app.core.lsh import optimal_bands
from app.core.text import normalize
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
    false_positives: list[Example]  # every false positive, for the figures
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
    """Both modes' quality figures: this run's, and the other mode's last saved run with
    the same defaults, and whether the two agree (they must: only the transport differs)."""
    other: Mode = "process" if report.mode == "asgi" else "asgi"
    path = REPO_ROOT / "bench" / "results" / f"reuters_http-{other}.json"
    current = asdict(report)
    runs = [(report.mode, current)]
    if not path.is_file():
        status = f"`{other}`: not run on this machine"
    else:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("defaults") != current["defaults"]:
            status = f"`{other}` ({saved['when']}): other default settings, run it again"
        else:
            runs.append((other, saved))
            same = quality(saved) == quality(current)
            status = "identical" if same else "**differ: a bug** (compare the two JSON files)"
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
    return markdown_table(headers, rows, align) + f"\n\nQuality figures of the two modes: {status}."


def figures_table(report: Report) -> str:
    """The run's counts that docs/evaluation-http.md quotes in its prose."""
    s, d = report.service, report.peer.scores
    b, r = report.bands
    skipped = ", ".join(report.skipped) or "none"
    rows = [
        ["mode, run", f"`{report.mode}`, {report.when}"],
        ["machine", report.machine],
        [
            "stories; replayed; refused (ids)",
            f"{report.corpus_total:,}; {report.replayed:,}; {len(report.skipped)} ({skipped})",
        ],
        [f"batches of {BATCH_SIZE}", str(report.batches)],
        ["service LSH bands x rows", f"{b} x {r}"],
        [
            f"results holding {INSERT_MATCH_LIMIT} matches; missed pairs among them",
            f"{report.capped}; {report.capped_missed}",
        ],
        ["datasketch bands x rows", f"{report.peer.bands} x {report.peer.rows}"],
        [
            "positives (J >= 0.8); of them J = 1.0; related",
            f"{s.positives}; {s.identical}; {s.related}",
        ],
        [
            "labelled pairs whose exact Jaccard equals the label",
            f"{report.label_agreement} of {s.positives + s.related}",
        ],
        [
            "labelled clusters; kept whole; split",
            f"{report.clusters}; {report.clusters_whole}; "
            f"{report.clusters - report.clusters_whole}",
        ],
        ["service clusters of two or more", str(report.service_clusters)],
        ["cluster_id read back differing from the insert's", str(report.get_mismatches)],
        [
            "identical pairs with equal normalised texts; found",
            f"{report.identical_equal_text}; {report.identical_equal_text_found}",
        ],
        ["candidate pairs (for the exact-Jaccard rows)", f"{report.candidates:,}"],
        [f"F1 >= {TARGET_F1}", f"{fraction(s.f1)}: {verdict(s.f1 >= TARGET_F1)}"],
        [
            "every identical pair found",
            f"{s.identical_found} of {s.identical}: {verdict(s.identical_found == s.identical)}",
        ],
        [
            "F1 above datasketch's on the same shingles",
            f"{fraction(s.f1)} against {fraction(d.f1)}: {verdict(s.f1 > d.f1)}",
        ],
        [
            "misses: exact J; MinHash estimate",
            f"{span([e.own_jaccard for e in report.missed_examples])}; "
            f"{span([e.similarity for e in report.missed_examples])}",
        ],
        [
            "false positives: exact J; MinHash estimate",
            f"{span([e.own_jaccard for e in report.false_positives])}; "
            f"{span([e.similarity for e in report.false_positives])}",
        ],
    ]
    return markdown_table(["figure", "value"], rows, ["left", "left"])


def render(report: Report) -> str:
    """Tables only: the prose that reads them is docs/evaluation-http.md's."""
    s = report.service
    split = "; ".join(", ".join(members) for members in report.split_clusters) or "none"
    return "\n".join(
        [
            "# Reuters-21578 through the HTTP API: tables",
            "",
            "From `python -m bench.reuters_http`; docs/evaluation-http.md says what they mean.",
            "",
            "## Figures",
            "",
            figures_table(report),
            "",
            "## Results",
            "",
            scores_table(report),
            "",
            "## Both modes",
            "",
            modes_section(report),
            "",
            "## Other settings, the peer and the exact Jaccard on the candidates",
            "",
            "Settings: " + "; ".join(f"{v.name}: `{v.settings}`" for v in report.variants),
            "",
            variants_table(report),
            "",
            f"## Missed positives ({s.positives - s.true_positives})",
            "",
            example_table(report.missed_examples),
            "",
            f"## False positives ({s.false_positives}) by kind",
            "",
            markdown_table(
                ["kind", "pairs", f"{OWN} J >= {LSH_THRESHOLD}", "est. J"],
                report.fp_kinds,
                ["left", "right", "right", "right"],
            ),
            "",
            example_table(report.false_examples),
            "",
            f"## Labelled clusters split ({report.clusters - report.clusters_whole})",
            "",
            split,
            "",
        ]
    )


def save(report: Report) -> Path:
    data = asdict(report)
    return write_result(f"reuters_http-{report.mode}.json", json.dumps(data, indent=1))


# ---------------------------------------------------------------------------- --window

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
    return f"""\
# Reuters-21578 by date, with a match window: tables

From `python -m bench.reuters_http --window` on {report.when}; docs/evaluation-window.md says
what they mean. {report.positives} labelled positives (J >= 0.8), {report.related} related.

{table}

## How far apart the labelled pairs are

{gaps}

## Labelled positives more than 48 hours apart

{far}
"""


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["asgi", "process"], default="asgi")
    parser.add_argument(
        "--window",
        action="store_true",
        help="replay with each story's date as its timestamp, with and without match windows "
        "(tables for docs/evaluation-window.md)",
    )
    args = parser.parse_args(argv)
    if args.window:
        window = run_window(args.mode)
        text = render_window(window)
        write_result("reuters_window.json", json.dumps(asdict(window), indent=1))
        path = write_result("reuters_window.md", text)
        print(text)
        print(f"written to {path.relative_to(REPO_ROOT)}", file=sys.stderr)
        return
    report = run(args.mode)
    text = render(report)
    save(report)
    path = write_result(f"reuters_http-{args.mode}.md", text)
    print(text)
    print(f"written to {path.relative_to(REPO_ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
