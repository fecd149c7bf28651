"""Planted near-duplicates of Reuters titles, searched in the default collection over HTTP.

Run ``.venv/bin/python -m bench.reuters_titles [--per-kind N]``. The Reuters-21578
titles of at least MIN_CHARS normalised characters, one story per distinct normalised
title, are split by a seeded hash of the story id into titles to insert and held-out ones.
The inserted titles go into a collection created with no settings (the defaults: the
n-gram index on, 3-grams, Jaccard >= 0.7, texts of up to 200 characters) through
``POST /v1/collections/{name}/documents/batch``, in process (httpx on the ASGI application
and a memory store). Then ``POST .../search`` is asked for:

- planted variants of inserted titles: one-character edits (substitution, insertion,
  deletion, adjacent transposition as in "HOUSING" -> "HOSUING"), two edits, case and
  spacing changes, one punctuation mark changed, all punctuation stripped. A variant is
  *found* when its original is among the matches;
- the re-issued stories of the labelled near-duplicate pairs
  (``reuters21578.near_dup_pairs.tsv``): each later story's title, in a second default
  collection that holds the titles of every story in a pair;
- the held-out titles: those whose best 3-gram Jaccard to every inserted title is below
  the threshold are *unrelated*, and any match of theirs is a false match.

Every answer is checked against brute force, the exact Jaccard of the q-gram sets of
``app.core.text.normalize``d texts (Python sets for a variant and its original; shared
q-grams counted over inverted lists for a query against every stored title): the ids
the n-gram index returns (method "ngram") must be exactly the stored titles at or above
the threshold. Variants are
drawn per title from a generator seeded with (seed, kind, story id), so a run on fewer
titles plants the same variants in those titles. Writes docs/evaluation-titles.md and
prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import math
import random
import re
import statistics
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
import numpy.typing as npt
from fastapi import FastAPI

from app.collection_config import DEFAULT_NGRAM_MAX_CHARS, CollectionConfig
from app.config import Settings
from app.core.template import differing_numbers
from app.core.text import normalize
from app.main import create_app, memory_store
from devkit.harness import REPO_ROOT, Align, load_reuters, markdown_table

DATA_DIR = REPO_ROOT.parent / "shared/data/reuters21578"
PAIRS_PATH = DATA_DIR / "reuters21578.near_dup_pairs.tsv"
OUTPUT_PATH = REPO_ROOT / "docs" / "evaluation-titles.md"

DEFAULTS = CollectionConfig()  # what a collection created with no settings gets
Q = DEFAULTS.ngram.size
THRESHOLD = DEFAULTS.ngram.threshold
# Variants (up to two characters longer) of titles up to MAX_CHARS stay within the default
# ngram.max_chars (100): the 10 longer Reuters titles are not short texts.
MAX_CHARS = DEFAULT_NGRAM_MAX_CHARS - 2
MIN_CHARS = 30  # titles of at least this many normalised characters are planted in
HELD_OUT_PERCENT = 10  # of the distinct titles, kept out of the collection
SEED = 12
BATCH_SIZE = 1000  # the service's largest batch by default
SEARCH_LIMIT = 1000  # the largest limit by default: no match is cut off
NEAR_DUP_J = 0.8  # labelled pairs at or above this are near-duplicate stories
TITLES = "titles"
REISSUED = "reissued"
READY_TIMEOUT_SECONDS = 300  # a first start compiles the numba kernels
EXAMPLES = 8
MISSES_PER_KIND = 4

# Planted kinds, in the report's order. The one-edit kinds are pooled as "one edit".
SUBSTITUTION = "substitution"
INSERTION = "insertion"
DELETION = "deletion"
TRANSPOSITION = "transposition"
TWO_EDITS = "two edits"
CASE = "case and spacing"
PUNCTUATION = "one punctuation mark"
STRIPPED = "all punctuation stripped"
ONE_EDIT_KINDS = (SUBSTITUTION, INSERTION, DELETION, TRANSPOSITION)
KINDS = (*ONE_EDIT_KINDS, TWO_EDITS, CASE, PUNCTUATION, STRIPPED)
KIND_NOTES = {
    SUBSTITUTION: "a letter or digit replaced by another",
    INSERTION: "a letter inserted inside the title",
    DELETION: "a character other than a space deleted",
    TRANSPOSITION: 'two adjacent letters or digits swapped ("HOUSING" -> "HOSUING")',
    TWO_EDITS: "two of substitution, insertion and deletion, at independent places",
    CASE: "lower or title case, a space doubled or made a newline: same normalised text",
    PUNCTUATION: "a mark removed or replaced by another; a comma added where there is none",
    STRIPPED: "every mark removed (titles with a mark only)",
}
MARKS = ",.-/'&"
LENGTH_BUCKETS = ((30, 39), (40, 49), (50, 69), (70, 1000))
TUNING_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
TITLE_J_BUCKETS = (
    (0.9, 1.0),
    (0.8, 0.9),
    (0.7, 0.8),
    (0.6, 0.7),
    (0.5, 0.6),
    (0.4, 0.5),
    (0.3, 0.4),
    (0.0, 0.3),
)

Method = str
T = TypeVar("T")
Ids = frozenset[str]


# ---------------------------------------------------------------------------- q-grams


def qgrams(text: str) -> frozenset[str]:
    """The q-grams of an already normalised text; shorter than q: one q-gram, the text."""
    if len(text) < Q:
        return frozenset((text,)) if text else frozenset()
    return frozenset(text[i : i + Q] for i in range(len(text) - Q + 1))


_NUMBER = re.compile(r"\d+(?:[.,/]\d+)*")


def numbers(text: str) -> list[str]:
    """The figures of a text, in order: "1.9", "23", "1986/87"."""
    return _NUMBER.findall(text)


def jaccard(a: str, b: str) -> float:
    """Exact Jaccard of the q-gram sets of two texts, normalised here: the reference."""
    x, y = qgrams(normalize(a)), qgrams(normalize(b))
    union = len(x | y)
    return len(x & y) / union if union else 0.0


def template(first: str, second: str) -> bool:
    """Whether the default collection's template rule (``ngram.same_numbers``) refuses the
    pair: two reports of one template (app/core/template.py), on the normalised texts."""
    rule_on = DEFAULTS.ngram.same_numbers
    return rule_on and differing_numbers(normalize(first), normalize(second)) is not None


class BruteForce:
    """Exact Jaccard of a query's q-grams to every stored text, by counting shared q-grams
    over an inverted list per q-gram (numpy ``bincount``): |x & y| / (|x| + |y| - |x & y|),
    the same float64 division as ``len(x & y) / len(x | y)``.

    Cost: the postings of the query's q-grams, plus one pass over the stored texts.
    """

    def __init__(self, texts: dict[str, str]) -> None:
        self.ids = list(texts)
        self.texts = [normalize(text) for text in texts.values()]
        postings: dict[str, list[int]] = {}
        sizes: list[int] = []
        for row, text in enumerate(texts.values()):
            grams = qgrams(normalize(text))
            sizes.append(len(grams))
            for gram in grams:
                postings.setdefault(gram, []).append(row)
        self.sizes = np.array(sizes, dtype=np.int64)
        self.postings = {g: np.array(rows, dtype=np.int64) for g, rows in postings.items()}

    def scores(self, text: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(rows, Jaccard) of the stored texts that share a q-gram with the text."""
        grams = qgrams(normalize(text))
        lists = [self.postings[g] for g in grams if g in self.postings]
        if not lists:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        counts = np.bincount(np.concatenate(lists), minlength=len(self.ids))
        rows = np.flatnonzero(counts)
        shared = counts[rows]
        return rows, shared / (len(grams) + self.sizes[rows] - shared)

    def above(self, text: str, threshold: float) -> Ids:
        if len(normalize(text)) > DEFAULT_NGRAM_MAX_CHARS:
            return frozenset()  # not a short text: the n-gram index is not asked
        rows, similarity = self.scores(text)
        query = normalize(text)
        return frozenset(
            self.ids[row]
            for row in rows[similarity >= threshold].tolist()
            if not template(query, self.texts[row])
        )

    def best(self, text: str) -> tuple[float, str | None]:
        rows, similarity = self.scores(text)
        if not len(rows):
            return 0.0, None
        at = int(np.argmax(similarity))
        return float(similarity[at]), self.ids[int(rows[at])]


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Titles:
    inserted: dict[str, str]  # story id -> title, one story per distinct normalised title
    held_out: dict[str, str]
    distinct: int  # distinct normalised titles of MIN_CHARS or more
    stories: int  # stories whose title has MIN_CHARS or more normalised characters


def seeded_rank(seed: int, *parts: str) -> int:
    """A deterministic pseudo-random number for this seed and these strings."""
    digest = hashlib.sha256(":".join((str(seed), *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def load_titles(seed: int = SEED, limit: int | None = None) -> Titles | None:
    """The titles to insert and the held-out ones (the first ``limit`` of the inserted ones
    in the seeded order, when given; the held-out ones are the same either way)."""
    stories = load_reuters()
    if stories is None:
        return None
    first: dict[str, tuple[str, str]] = {}  # normalised title -> (id, title) of its first story
    long_stories = 0
    for story in stories:
        title = story.get("title") or ""
        key = normalize(title)
        if MIN_CHARS <= len(key) <= MAX_CHARS:
            long_stories += 1
            first.setdefault(key, (str(story["id"]), title))
    ordered = sorted(first.values(), key=lambda item: seeded_rank(seed, "order", item[0]))
    held_out = {i: t for i, t in ordered if seeded_rank(seed, "held", i) % 100 < HELD_OUT_PERCENT}
    inserted = [(i, t) for i, t in ordered if i not in held_out]
    return Titles(dict(inserted[:limit]), held_out, len(first), long_stories)


@dataclass(frozen=True, slots=True)
class LabelledPair:
    earlier: str  # story ids, by date
    later: str
    labelled_j: float  # word 5-gram Jaccard of title + body (the data set's label)


def load_pairs() -> tuple[list[LabelledPair], dict[str, str]] | None:
    """The labelled pairs (the earlier story by date first) and every story's title."""
    stories = load_reuters()
    if stories is None or not PAIRS_PATH.is_file():
        return None
    position = {str(story["id"]): at for at, story in enumerate(stories)}
    titles = {str(story["id"]): story.get("title") or "" for story in stories}
    pairs: list[LabelledPair] = []
    with PAIRS_PATH.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            earlier, later = sorted((row["id_a"], row["id_b"]), key=position.__getitem__)
            pairs.append(LabelledPair(earlier, later, float(row["jaccard"])))
    return pairs, titles


# ---------------------------------------------------------------------------- variants


def _is_mark(char: str) -> bool:
    return not char.isalnum() and not char.isspace()


def _substitute(text: str, rng: random.Random) -> str | None:
    places = [i for i, c in enumerate(text) if c.isalnum()]
    if not places:
        return None
    at = rng.choice(places)
    old = text[at]
    pool = string.digits if old.isdigit() else string.ascii_uppercase
    new = rng.choice([c for c in pool if c != old.upper()])
    return text[:at] + new + text[at + 1 :]


def _insert(text: str, rng: random.Random) -> str | None:
    at = rng.randint(1, len(text) - 1)
    return text[:at] + rng.choice(string.ascii_uppercase) + text[at:]


def _delete(text: str, rng: random.Random) -> str | None:
    places = [i for i, c in enumerate(text) if not c.isspace()]
    at = rng.choice(places)
    return text[:at] + text[at + 1 :]


def _transpose(text: str, rng: random.Random) -> str | None:
    places = [
        i
        for i in range(len(text) - 1)
        if text[i].isalnum() and text[i + 1].isalnum() and text[i].upper() != text[i + 1].upper()
    ]
    if not places:
        return None
    at = rng.choice(places)
    return text[:at] + text[at + 1] + text[at] + text[at + 2 :]


def _two_edits(text: str, rng: random.Random) -> str | None:
    edits = (_substitute, _insert, _delete)
    first = rng.choice(edits)(text, rng)
    return None if first is None else rng.choice(edits)(first, rng)


def _case(text: str, rng: random.Random) -> str | None:
    text = rng.choice((str.lower, str.title))(text)
    spaces = [i for i, c in enumerate(text) if c == " "]
    if spaces:
        at = rng.choice(spaces)
        text = text[:at] + rng.choice(("  ", "\n")) + text[at + 1 :]
    return text


def _punctuation(text: str, rng: random.Random) -> str | None:
    marks = [i for i, c in enumerate(text) if _is_mark(c)]
    if not marks:
        spaces = [i for i, c in enumerate(text) if c == " "]
        at = rng.choice(spaces)
        return text[:at] + "," + text[at:]
    at = rng.choice(marks)
    new = rng.choice(["", *(m for m in MARKS if m != text[at])])
    return text[:at] + new + text[at + 1 :]


def _strip(text: str, rng: random.Random) -> str | None:
    if not any(_is_mark(c) for c in text):
        return None
    return "".join(c for c in text if not _is_mark(c))


PLANTERS: dict[str, Callable[[str, random.Random], str | None]] = {
    SUBSTITUTION: _substitute,
    INSERTION: _insert,
    DELETION: _delete,
    TRANSPOSITION: _transpose,
    TWO_EDITS: _two_edits,
    CASE: _case,
    PUNCTUATION: _punctuation,
    STRIPPED: _strip,
}


def plant(kind: str, story_id: str, title: str, seed: int = SEED) -> str | None:
    """A variant of the title of this kind, or None when the title has none (no mark to
    strip). Edits change the normalised text; case and spacing changes leave it equal."""
    rng = random.Random(f"{seed}:{kind}:{story_id}")
    text = " ".join(title.split())
    for _ in range(100):
        variant = PLANTERS[kind](text, rng)
        if variant is None:
            return None
        same = normalize(variant) == normalize(text)
        if same == (kind == CASE) and normalize(variant):
            return variant
    raise RuntimeError(f"no {kind} variant of {title!r}")


# ---------------------------------------------------------------------------- service


class InProcessClient:
    """httpx on the ASGI application, driven from this thread's own event loop: the HTTP
    API in process without the hop to a portal thread that Starlette's TestClient makes
    for every message (about 3 ms a search there, 1 ms here)."""

    def __init__(self, app: FastAPI) -> None:
        self._loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://neardup")

    def request(self, method: str, url: str, body: object) -> httpx.Response:
        return self._loop.run_until_complete(self._client.request(method, url, json=body))

    def put(self, url: str, json: object) -> httpx.Response:
        return self.request("PUT", url, json)

    def post(self, url: str, json: object) -> httpx.Response:
        return self.request("POST", url, json)

    def run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        self.run(self._client.aclose())
        self._loop.close()


@contextmanager
def service() -> Iterator[InProcessClient]:
    """The application in process on a memory store, its lifespan run, ready."""
    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(data_dir=Path(data_dir)), store_factory=memory_store)
        client = InProcessClient(app)
        lifespan = app.router.lifespan_context(app)
        client.run(lifespan.__aenter__())
        try:
            if not app.state.ready.wait(READY_TIMEOUT_SECONDS):
                raise RuntimeError(f"not ready: {app.state.startup_error}")
            yield client
        finally:
            client.run(lifespan.__aexit__(None, None, None))
            client.close()


def create_default_collection(client: InProcessClient, name: str) -> dict[str, object]:
    """A collection created with no settings; returns the settings the service gave it."""
    response = client.put(f"/v1/collections/{name}", json={})
    if response.status_code != 201:
        raise RuntimeError(f"PUT {name}: {response.status_code} {response.text}")
    settings: dict[str, object] = response.json()["settings"]
    return settings


def insert_all(client: InProcessClient, name: str, texts: dict[str, str]) -> None:
    items = list(texts.items())
    for start in range(0, len(items), BATCH_SIZE):
        documents = [{"id": i, "text": t} for i, t in items[start : start + BATCH_SIZE]]
        response = client.post(
            f"/v1/collections/{name}/documents/batch",
            json={"documents": documents, "on_duplicate": "insert"},
        )
        if response.status_code != 200:
            raise RuntimeError(f"batch at {start}: {response.status_code} {response.text[:300]}")
        for result in response.json()["results"]:
            if not result.get("inserted"):
                raise RuntimeError(f"not inserted: {result}")


@dataclass(frozen=True, slots=True)
class Match:
    similarity: float
    methods: tuple[Method, ...]


def search(client: InProcessClient, name: str, text: str) -> dict[str, Match]:
    response = client.post(
        f"/v1/collections/{name}/search", json={"text": text, "limit": SEARCH_LIMIT}
    )
    if response.status_code != 200:
        raise RuntimeError(f"search {text!r}: {response.status_code} {response.text[:300]}")
    matches = response.json()["matches"]
    if len(matches) >= SEARCH_LIMIT:
        raise RuntimeError(f"search {text!r}: {len(matches)} matches, the limit")
    return {m["id"]: Match(m["similarity"], tuple(m["methods"])) for m in matches}


def ngram_ids(matches: dict[str, Match]) -> Ids:
    return frozenset(i for i, m in matches.items() if "ngram" in m.methods)


# ---------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, slots=True)
class Planted:
    kind: str
    story_id: str
    original: str
    variant: str
    chars: int  # normalised characters of the original
    reference_j: float  # brute-force q-gram Jaccard of variant and original
    match: Match | None  # the original's match, None when not found
    exact: bool  # the n-gram matches are exactly the brute-force ones over every title

    @property
    def reachable(self) -> bool:
        """At the threshold, and not two reports of one template (``template``)."""
        return self.reference_j >= THRESHOLD and not template(self.variant, self.original)

    def found_by(self, method: Method) -> bool:
        return self.match is not None and method in self.match.methods


@dataclass(frozen=True, slots=True)
class HeldOut:
    story_id: str
    title: str
    best_j: float  # best brute-force q-gram Jaccard to an inserted title
    best_id: str | None
    best_title: str  # the inserted title of best_j ("" when none shares a q-gram)
    matches: dict[str, Match]
    exact: bool

    @property
    def numbers_differ(self) -> bool:
        """The best inserted title carries other figures: a templated title of another
        story ("... GIVEN 97 MLN STG ASSISTANCE" and "... 53 MLN ...")."""
        return numbers(self.title) != numbers(self.best_title)

    @property
    def unrelated(self) -> bool:
        return self.best_j < THRESHOLD


@dataclass(frozen=True, slots=True)
class Reissued:
    pair: LabelledPair
    titles: tuple[str, str]
    title_j: float
    match: Match | None  # the earlier story's match when the later title is searched
    exact: bool

    def found_by(self, method: Method) -> bool:
        return self.match is not None and method in self.match.methods

    @property
    def reachable(self) -> bool:
        """The later title at the threshold to the earlier, and not another report."""
        return self.title_j >= THRESHOLD and not template(*self.titles)

    @property
    def same_title(self) -> bool:
        return normalize(self.titles[0]) == normalize(self.titles[1])


@dataclass(slots=True)
class Evaluation:
    settings: dict[str, object]
    titles: Titles
    inserted: int
    planted: list[Planted] = field(default_factory=list)
    held_out: list[HeldOut] = field(default_factory=list)
    reissued: list[Reissued] = field(default_factory=list)
    pair_titles: int = 0  # titles in the second collection
    seconds: float = 0.0
    queries: int = 0

    def of_kind(self, *kinds: str) -> list[Planted]:
        return [p for p in self.planted if p.kind in kinds]

    def exact_searches(self) -> int:
        """Searches whose n-gram matches were exactly the brute-force set."""
        searches: Sequence[Planted | HeldOut | Reissued] = [
            *self.planted,
            *self.held_out,
            *self.reissued,
        ]
        return sum(s.exact for s in searches)


def progress(what: str, began: float) -> None:
    print(f"{time.perf_counter() - began:6.1f} s  {what}", file=sys.stderr)


def evaluate(
    seed: int = SEED,
    limit: int | None = None,
    per_kind: int | None = None,
    held_out: int | None = None,
) -> Evaluation | None:
    """Insert the titles (the first ``limit``), plant variants in the first ``per_kind``
    of them, search the first ``held_out`` held-out titles and every re-issued story's
    title; None when the data is absent."""
    titles = load_titles(seed, limit)
    loaded = load_pairs()
    if titles is None or loaded is None:
        return None
    pairs, story_titles = loaded
    began = time.perf_counter()
    brute = BruteForce(titles.inserted)
    with service() as client:
        settings = create_default_collection(client, TITLES)
        insert_all(client, TITLES, titles.inserted)
        evaluation = Evaluation(settings, titles, len(titles.inserted))
        progress(f"{len(titles.inserted):,} titles inserted", began)
        for story_id, title in list(titles.inserted.items())[:per_kind]:
            for kind in KINDS:
                variant = plant(kind, story_id, title, seed)
                if variant is None:
                    continue
                matches = search(client, TITLES, variant)
                reference_j = jaccard(variant, title)
                expected = brute.above(variant, THRESHOLD)
                reachable = reference_j >= THRESHOLD and not template(variant, title)
                if (story_id in expected) != reachable:
                    raise RuntimeError(f"the two references disagree on {variant!r}")
                evaluation.planted.append(
                    Planted(
                        kind=kind,
                        story_id=story_id,
                        original=title,
                        variant=variant,
                        chars=len(normalize(title)),
                        reference_j=reference_j,
                        match=matches.get(story_id),
                        exact=ngram_ids(matches) == expected,
                    )
                )
        progress(f"{len(evaluation.planted):,} planted variants searched", began)
        for story_id, title in list(titles.held_out.items())[:held_out]:
            matches = search(client, TITLES, title)
            best_j, best_id = brute.best(title)
            best_title = "" if best_id is None else titles.inserted[best_id]
            exact = ngram_ids(matches) == brute.above(title, THRESHOLD)
            evaluation.held_out.append(
                HeldOut(story_id, title, best_j, best_id, best_title, matches, exact)
            )
        progress(f"{len(evaluation.held_out):,} held-out titles searched", began)
        evaluate_reissued(client, evaluation, pairs, story_titles)
        progress(f"{len(evaluation.reissued):,} re-issued titles searched", began)
    evaluation.seconds = time.perf_counter() - began
    evaluation.queries = len(evaluation.planted) + len(evaluation.held_out)
    evaluation.queries += len(evaluation.reissued)
    return evaluation


def evaluate_reissued(
    client: InProcessClient,
    evaluation: Evaluation,
    pairs: Sequence[LabelledPair],
    story_titles: dict[str, str],
) -> None:
    """The titles of every story in a labelled pair (when it has one) in a second default
    collection; each later story's title searched there, the earlier one looked for."""
    with_title = [p for p in pairs if normalize(story_titles[p.earlier])]
    with_title = [p for p in with_title if normalize(story_titles[p.later])]
    members = sorted({i for p in with_title for i in (p.earlier, p.later)}, key=int)
    stored = {i: story_titles[i] for i in members}
    create_default_collection(client, REISSUED)
    insert_all(client, REISSUED, stored)
    brute = BruteForce(stored)
    for p in with_title:
        earlier, later = story_titles[p.earlier], story_titles[p.later]
        matches = search(client, REISSUED, later)
        evaluation.reissued.append(
            Reissued(
                pair=p,
                titles=(earlier, later),
                title_j=jaccard(earlier, later),
                match=matches.get(p.earlier),
                exact=ngram_ids(matches) == brute.above(later, THRESHOLD),
            )
        )
    evaluation.pair_titles = len(stored)


# ---------------------------------------------------------------------------- figures


def recall(items: Sequence[Planted]) -> float:
    """The share of the variants whose original was found, by any method."""
    return sum(p.match is not None for p in items) / len(items) if items else 1.0


def ngram_recall(items: Sequence[Planted]) -> float:
    return sum(p.found_by("ngram") for p in items) / len(items) if items else 1.0


def threshold_for(values: Sequence[float], share: float) -> float:
    """The highest threshold t with at least ``share`` of the values >= t."""
    ordered = sorted(values, reverse=True)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def share_at(values: Sequence[float], threshold: float) -> float:
    return sum(v >= threshold for v in values) / len(values) if values else 1.0


def pct(numerator: int, denominator: int) -> str:
    return f"{100 * numerator / denominator:.1f}%" if denominator else "-"


def fmt_j(value: float) -> str:
    return f"{value:.3f}"


def median_or_dash(values: Sequence[float]) -> str:
    return fmt_j(statistics.median(values)) if values else "-"


def floor2(value: float) -> float:
    """Rounded down to two decimals: a threshold that keeps what ``value`` keeps."""
    return math.floor(value * 100 + 1e-9) / 100


# ---------------------------------------------------------------------------- report

RIGHT: Align = "right"


def first_left(count: int) -> list[Align]:
    """Table alignment: a label column, then ``count`` figures."""
    return ["left", *[RIGHT] * count]


def planted_table(evaluation: Evaluation) -> str:
    rows: list[list[str]] = []
    groups = [(kind, evaluation.of_kind(kind)) for kind in KINDS]
    groups.insert(
        len(ONE_EDIT_KINDS), ("one edit (the four above)", evaluation.of_kind(*ONE_EDIT_KINDS))
    )
    for name, items in groups:
        n = len(items)
        found = [p for p in items if p.match is not None]
        by = {
            m: sum(p.found_by(m) for p in items) for m in ("exact", "ngram", "minhash", "simhash")
        }
        without_ngram = sum(p.match is not None and not p.found_by("ngram") for p in items)
        rows.append(
            [
                name,
                f"{n:,}",
                f"{len(found):,} ({pct(len(found), n)})",
                pct(by["ngram"], n),
                pct(by["exact"], n),
                pct(by["minhash"], n),
                pct(by["simhash"], n),
                str(without_ngram),
                median_or_dash([p.match.similarity for p in found if p.match is not None]),
                median_or_dash([p.reference_j for p in items]),
            ]
        )
    headers = [
        "kind",
        "planted",
        "found",
        "by ngram",
        "by exact",
        "by minhash",
        "by simhash",
        "found, not by ngram",
        "similarity (median)",
        "reference J (median)",
    ]
    return markdown_table(headers, rows, first_left(len(headers) - 1))


def reachable_table(evaluation: Evaluation) -> str:
    rows: list[list[str]] = []
    for name, kinds in (
        *((kind, (kind,)) for kind in KINDS),
        ("one edit", ONE_EDIT_KINDS),
        ("all planted", KINDS),
    ):
        items = evaluation.of_kind(*kinds)
        reachable = [p for p in items if p.reachable]
        unreachable = [p for p in items if not p.reachable]
        rows.append(
            [
                name,
                f"{len(items):,}",
                f"{len(reachable):,} ({pct(len(reachable), len(items))})",
                pct(sum(p.found_by("ngram") for p in reachable), len(reachable)),
                str(sum(p.found_by("ngram") for p in unreachable)),
                pct(sum(p.found_by("ngram") for p in items), len(items)),
                pct(sum(p.match is not None for p in items), len(items)),
                f"{sum(p.exact for p in items):,} / {len(items):,}",
            ]
        )
    headers = [
        "kind",
        "planted",
        f"reachable (J >= {THRESHOLD})",
        "ngram recall, reachable",
        "ngram found, J below",
        "ngram recall, all",
        "any method, all",
        "ngram answer = brute force",
    ]
    return markdown_table(headers, rows, first_left(len(headers) - 1))


def jaccard_table(evaluation: Evaluation) -> str:
    rows: list[list[str]] = []
    for name, kinds in (
        *((k, (k,)) for k in (*ONE_EDIT_KINDS, TWO_EDITS)),
        ("one edit", ONE_EDIT_KINDS),
    ):
        values = [p.reference_j for p in evaluation.of_kind(*kinds)]
        if not values:
            continue
        rows.append(
            [
                name,
                fmt_j(min(values)),
                fmt_j(threshold_for(values, 0.99)),
                fmt_j(threshold_for(values, 0.95)),
                fmt_j(statistics.median(values)),
                fmt_j(max(values)),
            ]
        )
    headers = ["kind", "min", "1st percentile", "5th percentile", "median", "max"]
    return markdown_table(headers, rows, first_left(5))


def length_table(evaluation: Evaluation) -> str:
    rows: list[list[str]] = []
    for low, high in LENGTH_BUCKETS:
        label = f"{low}-{high}" if high < 1000 else f"{low}+"
        cells = [label]
        for kinds in (ONE_EDIT_KINDS, (TWO_EDITS,)):
            items = [p for p in evaluation.of_kind(*kinds) if low <= p.chars <= high]
            values = [p.reference_j for p in items]
            cells += [
                f"{len(items):,}",
                pct(sum(p.reachable for p in items), len(items)),
                fmt_j(threshold_for(values, 0.95)) if values else "-",
            ]
        rows.append(cells)
    headers = [
        "title chars",
        "one edit",
        "J >= 0.7",
        "t for 95%",
        "two edits",
        "J >= 0.7",
        "t for 95%",
    ]
    return markdown_table(headers, rows, first_left(6))


def tuning_table(evaluation: Evaluation) -> str:
    one = [p.reference_j for p in evaluation.of_kind(*ONE_EDIT_KINDS)]
    two = [p.reference_j for p in evaluation.of_kind(TWO_EDITS)]
    renamed = [r.title_j for r in evaluation.reissued if not r.same_title]
    held = evaluation.held_out
    rows = []
    for t in TUNING_THRESHOLDS:
        over = [h for h in held if h.best_j >= t]
        rows.append(
            [
                f"{t:.2f}" + (" (default)" if t == THRESHOLD else ""),
                pct(sum(j >= t for j in one), len(one)),
                pct(sum(j >= t for j in two), len(two)),
                pct(sum(j >= t for j in renamed), len(renamed)),
                f"{len(over):,} ({pct(len(over), len(held))})",
                f"{sum(h.numbers_differ for h in over):,}",
            ]
        )
    headers = [
        "ngram.threshold",
        "one edit found",
        "two edits found",
        "re-issued, new title, found",
        "held-out titles matching another story",
        "of which other figures",
    ]
    return markdown_table(headers, rows, first_left(5))


def reissued_table(evaluation: Evaluation) -> str:
    changed = [r for r in evaluation.reissued if not r.same_title]
    rows: list[list[str]] = []
    for low, high in TITLE_J_BUCKETS:
        items = [r for r in changed if low <= r.title_j < high]
        rows.append(_reissued_row(f"[{low:.1f}, {high:.1f})", items))
    rows.append(_reissued_row("all with a new title", changed))
    near = [r for r in changed if r.pair.labelled_j >= NEAR_DUP_J]
    rows.append(_reissued_row(f"  of which stories J >= {NEAR_DUP_J}", near))
    rows.append(
        _reissued_row(f"  of which stories J < {NEAR_DUP_J}", [r for r in changed if r not in near])
    )
    same = [r for r in evaluation.reissued if r.same_title]
    rows.append(_reissued_row("same normalised title", same))
    headers = [
        "title 3-gram J",
        "pairs",
        "found",
        "by ngram",
        "by exact",
        "by minhash",
        "by simhash",
        "ngram = brute force",
    ]
    return markdown_table(headers, rows, first_left(7))


def _reissued_row(label: str, items: Sequence[Reissued]) -> list[str]:
    def by(method: Method) -> str:
        return pct(
            sum(r.match is not None and method in r.match.methods for r in items), len(items)
        )

    found = sum(r.match is not None for r in items)
    return [
        label,
        str(len(items)),
        f"{found} ({pct(found, len(items))})",
        by("ngram"),
        by("exact"),
        by("minhash"),
        by("simhash"),
        f"{sum(r.exact for r in items)} / {len(items)}",
    ]


def unrelated_table(evaluation: Evaluation) -> str:
    unrelated = [h for h in evaluation.held_out if h.unrelated]
    related = [h for h in evaluation.held_out if not h.unrelated]
    rows: list[list[str]] = []
    for label, items in (
        ("unrelated (best J < 0.7)", unrelated),
        ("related (best J >= 0.7)", related),
    ):
        queries_with = Counter[str]()
        pairs = Counter[str]()
        for h in items:
            for method in ("ngram", "exact", "minhash", "simhash"):
                count = sum(method in m.methods for m in h.matches.values())
                pairs[method] += count
                queries_with[method] += count > 0
        rows.append(
            [
                label,
                f"{len(items):,}",
                f"{sum(bool(h.matches) for h in items):,}",
                *(
                    f"{queries_with[m]} ({pairs[m]})"
                    for m in ("ngram", "exact", "minhash", "simhash")
                ),
                f"{sum(h.exact for h in items):,} / {len(items):,}",
            ]
        )
    headers = [
        "held-out titles",
        "searched",
        "with a match",
        "ngram: titles (matches)",
        "exact",
        "minhash",
        "simhash",
        "ngram = brute force",
    ]
    return markdown_table(headers, rows, first_left(7))


def false_match_examples(evaluation: Evaluation) -> list[list[str]]:
    rows: list[list[str]] = []
    for h in evaluation.held_out:
        if not h.unrelated:
            continue
        for other, match in h.matches.items():
            stored = evaluation.titles.inserted[other]
            rows.append(
                [
                    h.title,
                    stored,
                    "+".join(match.methods),
                    f"{match.similarity:.3f}",
                    fmt_j(jaccard(h.title, stored)),
                ]
            )
    return rows


def related_examples(evaluation: Evaluation) -> list[list[str]]:
    """Held-out titles at or above the threshold to an inserted one, spread over the range
    of their Jaccard (every k-th, lowest first)."""
    related = sorted(
        (h for h in evaluation.held_out if not h.unrelated), key=lambda h: (h.best_j, h.story_id)
    )
    step = max(1, len(related) // (EXAMPLES + 2))
    return [
        [
            h.title,
            h.best_title,
            fmt_j(h.best_j),
            "+".join(h.matches[h.best_id].methods) if h.best_id in h.matches else "not found",
            "yes" if h.numbers_differ else "",
        ]
        for h in related[::step][: EXAMPLES + 2]
    ]


def missed_examples(evaluation: Evaluation) -> list[list[str]]:
    """The missed variants nearest the threshold, a few of each kind with misses; the
    shortest titles first among equals."""
    misses = [p for p in evaluation.planted if p.match is None]
    misses.sort(key=lambda p: (KINDS.index(p.kind), -p.reference_j, p.chars, p.story_id))
    chosen: list[Planted] = []
    seen_kinds: Counter[str] = Counter()
    for p in misses:
        if seen_kinds[p.kind] < MISSES_PER_KIND:
            chosen.append(p)
            seen_kinds[p.kind] += 1
    return [[p.kind, p.original, p.variant, str(p.chars), fmt_j(p.reference_j)] for p in chosen]


def reissued_examples(evaluation: Evaluation) -> list[list[str]]:
    changed = [r for r in evaluation.reissued if not r.same_title]
    hosuing = [r for r in changed if "HOSUING" in r.titles[0] + r.titles[1]]
    found = sorted((r for r in changed if r.match is not None), key=lambda r: r.title_j)
    missed = sorted((r for r in changed if r.match is None), key=lambda r: -r.title_j)
    chosen: list[Reissued] = []
    for r in [*hosuing, *found[:3], *missed[:4]]:
        if r not in chosen:
            chosen.append(r)
    return [
        [
            r.titles[0],
            r.titles[1],
            fmt_j(r.title_j),
            f"{r.pair.labelled_j:.3f}",
            "+".join(r.match.methods) if r.match else "not found",
        ]
        for r in chosen
    ]


def render(evaluation: Evaluation, argv: Sequence[str]) -> str:
    titles = evaluation.titles
    one = evaluation.of_kind(*ONE_EDIT_KINDS)
    two = evaluation.of_kind(TWO_EDITS)
    two_j = [p.reference_j for p in two]
    one_j = [p.reference_j for p in one]
    reachable = [p for p in evaluation.planted if p.reachable]
    changed = [r for r in evaluation.reissued if not r.same_title]
    unrelated = [h for h in evaluation.held_out if h.unrelated]
    ngram_false = sum("ngram" in m.methods for h in unrelated for m in h.matches.values())
    other_false = sum(len(h.matches) for h in unrelated) - ngram_false
    related = [h for h in evaluation.held_out if not h.unrelated]
    related_figures = sum(h.numbers_differ for h in related)
    stripped = evaluation.of_kind(STRIPPED)
    stripped_reach = [p for p in stripped if p.reachable]
    changed_below_found = sum(r.title_j < THRESHOLD and r.match is not None for r in changed)
    one_missed = sum(p.match is None for p in one)
    stripped_rescued = sum(p.match is not None and not p.reachable for p in stripped)
    command = " ".join(["bench/reuters_titles.py", *argv])
    t95 = threshold_for(two_j, 0.95)
    lines = [
        "# Short titles: planted near-duplicates in the default collection",
        "",
        f"Generated by `{command}` (seed {SEED}); do not edit by hand, run it again.",
        "Issue 12's quality evaluation of the n-gram index on real titles: Reuters-21578",
        "(../shared/data/reuters21578) titles with planted edits, re-issued stories' titles,",
        "and unrelated titles, searched through the HTTP API (in process, memory store) in a",
        "collection created with no settings:",
        "",
        f"    {json.dumps(evaluation.settings)}",
        "",
        f"Titles of at least {MIN_CHARS} normalised characters: {titles.stories:,} stories,"
        f" {titles.distinct:,} distinct normalised titles (one story kept for each);"
        f" {len(titles.held_out):,} held out ({HELD_OUT_PERCENT}% by a seeded hash of the id),"
        f" {evaluation.inserted:,} inserted. Variants planted in"
        f" {len({p.story_id for p in evaluation.planted}):,} of them, one of each kind per"
        " title, searched with `POST /v1/collections/titles/search` (limit"
        f" {SEARCH_LIMIT}); a variant is *found* when its original is among the matches."
        " *Reference J* is the exact Jaccard of the 3-gram sets of the normalised variant and"
        " original (Python sets over `app.core.text.normalize`), which is what the n-gram"
        f" index decides on: it must return exactly the stored titles with J >= {THRESHOLD}."
        f" {evaluation.queries:,} searches, {evaluation.seconds:.0f} s in all (for"
        " information: one run on a shared machine).",
        "",
        "## Summary",
        "",
        f"- **Exactness.** Every planted variant with reference J >= {THRESHOLD}"
        f" ({len(reachable):,}) was found by the n-gram index"
        f" ({pct(sum(p.found_by('ngram') for p in reachable), len(reachable))}), none below it"
        f" ({sum(p.found_by('ngram') for p in evaluation.planted if not p.reachable)} found);"
        " the n-gram matches of every search"
        f" ({evaluation.exact_searches():,} of {evaluation.queries:,}) are exactly the"
        " brute-force set.",
        f"- **One edit:** {pct(sum(p.match is not None for p in one), len(one))} found"
        f" ({pct(sum(p.found_by('ngram') for p in one), len(one))} by ngram)."
        f" **Two edits:** {pct(sum(p.match is not None for p in two), len(two))} found"
        f" ({pct(sum(p.found_by('ngram') for p in two), len(two))} by ngram). The misses are"
        f" the variants whose 3-gram Jaccard fell below {THRESHOLD}: one character edit"
        " destroys up to three 3-grams and adds up to three, so in a 30-character title"
        " (28 3-grams) one edit can leave 25 of 31, J = 0.81, and two edits 22 of 34, J ="
        " 0.65.",
        f"- **Tuning `ngram.threshold`:** {floor2(t95):.2f} catches 95% of two-edit variants"
        f" (the 5th percentile of their reference J is {fmt_j(t95)}); one edit needs"
        f" {floor2(threshold_for(one_j, 0.95)):.2f} for 95% and"
        f" {floor2(threshold_for(one_j, 0.99)):.2f} for 99%.",
        f"- **Re-issued stories** whose title changed ({len(changed)} labelled pairs):"
        f" {sum(r.match is not None for r in changed)} matched by title alone;"
        f" {sum(r.title_j >= THRESHOLD for r in changed)} have title J >= {THRESHOLD}, of"
        f" which {sum(r.title_j >= THRESHOLD and r.found_by('ngram') for r in changed)} were"
        f" found by ngram; of those below, {changed_below_found} were found by any method.",
        f"- **Unrelated titles** ({len(unrelated):,} held-out titles with best J <"
        f" {THRESHOLD} to every inserted one): {ngram_false} false matches by ngram,"
        f" {other_false} by the other methods. The {len(related)} held-out titles at J >="
        f" {THRESHOLD} are matched, and are other stories: {related_figures} carry other"
        " figures in the same wording (see Unrelated titles).",
        f"- **Punctuation counts.** Normalisation keeps punctuation, so stripping every mark"
        f' ("<CMIN>" -> "CMIN", "U.S." -> "US") leaves {pct(len(stripped_reach), len(stripped))}'
        f" of those variants at J >= {THRESHOLD}; MinHash and SimHash, whose word tokens"
        f" ignore punctuation, find {stripped_rescued} of the others.",
        "- **Similarity.** Where MinHash matched too, the similarity reported is the higher of"
        " its estimate and the q-gram Jaccard: a punctuation-only change reports 1.0 (equal"
        " word tokens) where the q-gram Jaccard is lower.",
        "",
        "## Planted variants",
        "",
        "One of each kind per inserted title. *By method*: the share of planted variants whose"
        " original's match names that method; *similarity*: what the search reported for the"
        " original (the MinHash estimate, or the n-gram Jaccard where that is higher).",
        "",
        planted_table(evaluation),
        "",
        *(f"- {kind}: {note}" for kind, note in KIND_NOTES.items()),
        "",
        "## Recall against what is reachable",
        "",
        f"The n-gram index is exact, so it finds a variant if and only if its reference J is"
        f" at least {THRESHOLD}: recall 100% of the reachable ones is the requirement, recall"
        " of all planted ones is what the threshold costs. *ngram answer = brute force*: the"
        " searches whose n-gram matches (over every inserted title, not only the original)"
        " are exactly the brute-force set.",
        "",
        reachable_table(evaluation),
        "",
        "## Reference Jaccard of the edits",
        "",
        "The distribution of the 3-gram Jaccard of each variant to its original: a percentile"
        " p is the threshold that catches 100 - p% of the variants.",
        "",
        jaccard_table(evaluation),
        "",
        "By the original title's length (normalised characters): the share reachable at the"
        " default threshold and the threshold that catches 95% of them.",
        "",
        length_table(evaluation),
        "",
        "## Choosing `ngram.threshold`",
        "",
        "What each threshold would find, from the reference Jaccard (the index is exact, so"
        " this is what it returns), against what it would let through: held-out titles (other"
        " stories, none of them inserted) with an inserted title at or above it: the same"
        " news re-worded, which a lower threshold finds too, and templated titles with other"
        " figures (*of which other figures*; see Unrelated titles), which it also lets"
        " through.",
        "",
        tuning_table(evaluation),
        "",
        "## Re-issued stories",
        "",
        f"The labelled pairs of reuters21578.near_dup_pairs.tsv (word 5-gram Jaccard of title"
        f" and body >= 0.5; >= {NEAR_DUP_J} near-duplicates) whose stories both have a title:"
        f" the {evaluation.pair_titles} titles of their stories in a second default collection,"
        " each later story's title searched there, *found* when the earlier story is among"
        " the matches. Grouped by the titles' 3-gram Jaccard.",
        "",
        reissued_table(evaluation),
        "",
        markdown_table(
            ["earlier title", "later title", "title J", "stories J", "found by"],
            reissued_examples(evaluation),
            ["left", "left", "right", "right", "left"],
        ),
        "",
        "## Unrelated titles",
        "",
        f"The held-out titles (not inserted), searched in the collection of inserted titles;"
        f" *unrelated* when their best 3-gram Jaccard to every inserted title is below"
        f" {THRESHOLD}, so that any match is a false one. Cells: titles with a match of that"
        " method (matches).",
        "",
        unrelated_table(evaluation),
        "",
    ]
    false_rows = false_match_examples(evaluation)
    if false_rows:
        lines += [
            "The false matches of unrelated titles:",
            "",
            markdown_table(
                ["held-out title", "inserted title", "methods", "similarity", "3-gram J"],
                false_rows[:EXAMPLES],
                ["left", "left", "left", "right", "right"],
            ),
            "",
        ]
    lines += [
        f"The {len(related)} held-out titles at J >= {THRESHOLD} to an inserted title are"
        " matched, as they must be, by the n-gram index. Each is another story's title:"
        f" {related_figures} of them carry other figures than their best match (templated"
        " wire titles: money-market assistance, bill tenders, quarterly results); most of"
        " the rest are the same news re-worded, or with a ticker added or dropped, and a few"
        ' another subject in the same words ("COMEX COPPER" and "COMEX GOLD FUTURES EXPECTED'
        ' TO OPEN HIGHER"). Title similarity alone cannot tell a figures-only update from a'
        " typo. A sample, spread over their Jaccard:",
        "",
        markdown_table(
            ["held-out title", "best inserted title", "3-gram J", "found by", "other figures"],
            related_examples(evaluation),
            ["left", "left", "right", "left", "left"],
        ),
        "",
        "## Missed edits",
        "",
        "The missed variants nearest the threshold, for each kind with misses"
        f" ({one_missed} one-edit variants were missed): what a miss looks like.",
        "",
        markdown_table(
            ["kind", "original", "variant", "chars", "reference J"],
            missed_examples(evaluation),
            ["left", "left", "left", "right", "right"],
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--per-kind", type=int, default=None, help="plant in this many titles (default: all)"
    )
    args = parser.parse_args(argv)
    evaluation = evaluate(per_kind=args.per_kind)
    if evaluation is None:
        sys.exit(f"{DATA_DIR} not found: this evaluation needs the shared Reuters data")
    shown = [] if args.per_kind is None else ["--per-kind", str(args.per_kind)]
    text = render(evaluation, shown)
    OUTPUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT_PATH.write_text(text, encoding="utf-8")
    print(text)
    print(f"written to {OUTPUT_PATH.relative_to(REPO_ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
