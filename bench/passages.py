"""Shared passages on Reuters: the defaults of the passage index chosen by measurement.

Run ``.venv/bin/python -m bench.passages [--stories N] [--grid]``. Works on the core
(app/core/passages.py) as the service will use it: the stored texts' winnowed
fingerprints in a PassageIndex, a query's candidates by shared fingerprints, each
candidate verified by ``shared_passages``. Built from Reuters-21578 stories of at least
120 words (the sources; every one indexed):

- Clough-Stevenson-style answers (Clough and Stevenson 2011 graded answers by how they
  were made): an answer is some 250 words of other stories (on another subject) around
  a passage of 40-120 words of its source, taken as it is (*cut*), lightly revised
  (*light*: one word in ten replaced, dropped or doubled, two sentences swapped), or
  heavily revised (*heavy*: one word in three changed, as a paraphrase changes them; not
  expected to be found); and *non* answers, 300 words of other stories of the source's
  topic that quote nothing of it. Found: the source is among the query's passage
  matches. Clough's own corpus shares at most 8 consecutive words between a source and
  a non-plagiarised answer, 12 or more for a copied one.
- Roundups: 6 stories with headings between them, searched both ways: the roundup
  against the indexed stories (each story found inside it) and each story against the
  roundups indexed (the roundup found around it); with the share of the story the
  passages cover and whether every offset holds the same tokens in both texts.

Reports recall per kind, false matches, coverage, index bytes per stored document and
the time a document costs (tokens, fingerprints), over a grid of (k, window, minimum) with
``--grid``. Writes docs/evaluation-passages.md.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.backends.embedded.registry import Registry
from app.collection_config import CollectionConfig, PassagesConfig
from app.core.passages import (
    DEFAULT_K,
    DEFAULT_MINIMUM,
    DEFAULT_WINDOW,
    Passage,
    PassageIndex,
    Tokens,
    coverage,
    fingerprints,
    shared_passages,
    tokenize,
)
from app.service import NewDocument, Query
from app.storage.sqlite import SQLiteStore
from devkit.corpus import english_like_texts
from devkit.harness import REPO_ROOT, load_reuters, markdown_table, reuters_text

MIN_WORDS = 120
CANDIDATES = 20  # candidates verified a query, most shared fingerprints first
ROUNDUP_STORIES = 6
SEED = 2026


@dataclass(frozen=True)
class Setting:
    k: int
    window: int
    minimum: int

    def __str__(self) -> str:
        return f"k={self.k}, w={self.window}, min={self.minimum}"


@dataclass
class Corpus:
    sources: list[str]
    topics: list[str]
    answers: dict[str, list[tuple[str, int]]]  # kind -> (answer, its source)
    roundups: list[tuple[str, list[int]]]  # (roundup, the stories in it)


def _words(text: str) -> list[str]:
    return text.split()


def _shingles(text: str, size: int) -> set[tuple[str, ...]]:
    words = [w.strip(".,;:'\"()").lower() for w in text.split()]
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


def _revise(rng: random.Random, words: list[str], rate: float, vocabulary: list[str]) -> list[str]:
    revised: list[str] = []
    for word in words:
        roll = rng.random()
        if roll < rate / 3:
            revised.append(rng.choice(vocabulary))  # replaced
        elif roll < 2 * rate / 3:
            continue  # dropped
        elif roll < rate:
            revised += [word, rng.choice(vocabulary)]  # a word added
        else:
            revised.append(word)
    return revised


def build(stories: list[dict[str, object]], count: int, rng: random.Random) -> Corpus:
    texts = [reuters_text(s) for s in stories]
    keep = [i for i, t in enumerate(texts) if len(_words(t)) >= MIN_WORDS]
    sources = [texts[i] for i in keep]
    topics = [str((stories[i].get("topics") or ["none"])[0]) for i in keep]
    vocabulary = [w for t in sources[:500] for w in _words(t)]
    by_topic: dict[str, list[int]] = {}
    for index, topic in enumerate(topics):
        by_topic.setdefault(topic, []).append(index)

    def filler(source: int, words: int, same_topic: bool = False) -> str:
        """Words of other stories (of another topic, or with ``same_topic`` of the
        source's) that share no run of 9 words with the source (Reuters holds stories
        twice: such a one is not "non"), as Clough's non answers share at most 8."""
        own = _shingles(sources[source], 9)
        out: list[str] = []
        while len(out) < words:
            if same_topic:
                other = rng.choice(by_topic[topics[source]])
            else:
                other = rng.randrange(len(sources))
                if topics[other] == topics[source]:
                    continue
            taken = " ".join(_words(sources[other])[: rng.randint(30, 80)])
            if other != source and not own & _shingles(taken, 9):
                out += taken.split()
        return " ".join(out[:words])

    answers: dict[str, list[tuple[str, int]]] = {"cut": [], "light": [], "heavy": [], "non": []}
    chosen = rng.sample(range(len(sources)), min(count, len(sources)))
    for source in chosen:
        words = _words(sources[source])
        length = rng.randint(40, min(120, len(words)))
        start = rng.randrange(len(words) - length + 1)
        passage = words[start : start + length]
        before = filler(source, rng.randint(80, 150))
        after = filler(source, rng.randint(80, 150))
        light_sentences = _sentences(" ".join(_revise(rng, passage, 0.10, vocabulary)))
        if len(light_sentences) > 2:
            i = rng.randrange(len(light_sentences) - 1)
            light_sentences[i], light_sentences[i + 1] = light_sentences[i + 1], light_sentences[i]
        variants = {
            "cut": " ".join(passage),
            "light": " ".join(light_sentences),
            "heavy": " ".join(_revise(rng, passage, 0.33, vocabulary)),
        }
        for kind, inside in variants.items():
            answers[kind].append((f"{before}\n\n{inside}\n\n{after}", source))
        if len(by_topic[topics[source]]) > 5:
            answers["non"].append((filler(source, 300, same_topic=True), source))
    roundups: list[tuple[str, list[int]]] = []
    for _ in range(max(1, count // ROUNDUP_STORIES + 1)):
        members = rng.sample(range(len(sources)), ROUNDUP_STORIES)
        parts = [
            f"ROUNDUP {i + 1} OF {ROUNDUP_STORIES}\n{sources[m]}" for i, m in enumerate(members)
        ]
        roundups.append(("\n\n---\n\n".join(parts), members))
    return Corpus(sources, topics, answers, roundups)


class Searcher:
    """Stored texts in a PassageIndex, searched as the service will search them."""

    def __init__(self, texts: list[str], setting: Setting) -> None:
        self.setting = setting
        self.tokens = [tokenize(t) for t in texts]
        self.index = PassageIndex()
        self.index.insert_many(
            [fingerprints(t, setting.k, setting.window) for t in self.tokens],
            np.arange(len(texts)),
        )
        self.index.merge()

    def search(self, query: Tokens) -> dict[int, list[Passage]]:
        """Stored row -> its passages with the query (rows with at least one)."""
        keys = fingerprints(query, self.setting.k, self.setting.window)
        rows, _ = self.index.candidates(keys)
        found: dict[int, list[Passage]] = {}
        for row in rows[:CANDIDATES].tolist():
            passages = shared_passages(
                query, self.tokens[row], self.setting.k, self.setting.minimum
            )
            if passages:
                found[row] = passages
        return found


def _same_tokens(a: str, b: str) -> bool:
    ta, tb = tokenize(a), tokenize(b)
    return bool(np.array_equal(ta.hashes, tb.hashes))


def evaluate(corpus: Corpus, setting: Setting) -> dict[str, float]:
    stories = Searcher(corpus.sources, setting)
    result: dict[str, float] = {}
    for kind, answers in corpus.answers.items():
        hits = sum(source in stories.search(tokenize(a)) for a, source in answers)
        result[kind] = hits / max(1, len(answers))
    # Roundups against the stories: every story of each roundup found, covered, exact.
    found = covered = exact = total = 0
    coverages: list[float] = []
    for roundup, members in corpus.roundups:
        answer = stories.search(tokenize(roundup))
        for member in members:
            total += 1
            passages = answer.get(member, [])
            if passages:
                found += 1
                share = coverage(passages, len(corpus.sources[member]), of_match=True)
                coverages.append(share)
                covered += share >= 0.85
                source = corpus.sources[member]
                exact += all(
                    _same_tokens(roundup[p.start : p.end], source[p.match_start : p.match_end])
                    for p in passages
                )
    result["roundup: story found"] = found / total
    result["roundup: covered >= 85%"] = covered / total
    result["roundup: offsets exact"] = exact / max(1, found)
    # Stories against the roundups: the roundup found around each story.
    around = Searcher([r for r, _ in corpus.roundups], setting)
    inside = hits = 0
    for number, (_, members) in enumerate(corpus.roundups):
        for member in members:
            inside += 1
            hits += number in around.search(stories.tokens[member])
    result["story: roundup found"] = hits / inside
    result["index bytes / document"] = stories.index.memory_bytes() / len(corpus.sources)
    return result


def cost(texts: list[str], setting: Setting) -> float:
    """Microseconds a document for tokens and fingerprints (median of three runs)."""
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for text in texts:
            fingerprints(tokenize(text), setting.k, setting.window)
        runs.append((time.perf_counter() - started) / len(texts) * 1e6)
    return statistics.median(runs)


def service_costs(documents: int, runs: int) -> str:
    """The default collection against one with passages off, in process, on real text:
    Reuters stories and the same stories joined into 3 KB texts (bench/real_text.py's
    corpora), which share passages as news does; each held as the service holds it (a
    registry over SQLite: the kept texts read back from it). CPU time of the calling
    thread (``time.thread_time``) a document inserted (batches of 250, merges when due)
    and a search by a new joining of three stories; ``runs`` rounds, the two collections
    interleaved, medians."""
    from bench.real_text import corpora

    texts = corpora(documents, SEED)
    if texts is None:
        raise SystemExit("Reuters-21578 is not at ../shared/data/reuters21578: nothing to run")
    rng = random.Random(SEED)
    stories = texts["Reuters stories"]
    queries = ["\n\n".join(rng.sample(stories, 3))[:3000] for _ in range(1000)]
    settings = {"defaults": CollectionConfig(), "passages off": _PASSAGES_OFF}
    rows = []
    for corpus, stored in texts.items():
        figures: dict[str, dict[str, list[float]]] = {name: {} for name in settings}
        with tempfile.TemporaryDirectory(prefix="bench-passages-") as scratch:
            registry = Registry(SQLiteStore(Path(scratch) / "bench.db", "NORMAL"))
            registry.open()
            for name, config in settings.items():
                collection, _ = registry.create(name.replace(" ", "-"), config)
                started = time.thread_time()
                for at in range(0, len(stored), 250):
                    chunk = stored[at : at + 250]
                    collection.insert([NewDocument(t, f"d{at + i}") for i, t in enumerate(chunk)])
                    if collection.needs_merge():  # the service's merger thread, in line
                        collection.merge()
                figures[name]["insert"] = [1e6 * (time.thread_time() - started) / len(stored)]
                collection.merge(force=True)
                for query in queries[:50]:  # each kernel loaded before the clock starts
                    collection.search(query, Query())
            for _ in range(runs):
                for name in settings:
                    collection = registry.get(name.replace(" ", "-"))
                    started = time.thread_time()
                    for query in queries:
                        collection.search(query, Query())
                    spent = 1e6 * (time.thread_time() - started) / len(queries)
                    figures[name].setdefault("search", []).append(spent)
            registry.close()
        for measure in ("insert", "search"):
            on, off = (statistics.median(figures[name][measure]) for name in settings)
            rows.append(
                [corpus, f"{measure} (us CPU)", f"{on:,.0f}", f"{off:,.0f}", f"{off / on:.2f}x"]
            )
    return (
        f"{documents:,} documents of each corpus (Reuters stories of 60 words or more; 2-5 "
        f"of them joined and cut to 3 KB), in process over SQLite; CPU us a document "
        f"inserted (batches of 250, merges in line) and a search by a new joining of three "
        f"stories (1,000, {runs} rounds interleaved, medians). The ratio is the defaults' "
        f"speed against passages off.\n\n"
        + markdown_table(["corpus", "measure", "defaults", "passages off", "speed"], rows)
        + "\n"
    )


_PASSAGES_OFF = CollectionConfig(passages=PassagesConfig(enabled=False))


def lookup_costs(entries: int, runs: int) -> str:
    """A batch's passage lookups (one kernel call for 28,000 keys, an insert batch of 256
    3 KB texts) against a main run of ``entries`` spread keys, alone and with a buffer of
    the largest size the table lets it reach (sorted_table.promotion_due), three ways: no
    directory (galloping from the last key), a directory of 2^16 buckets (the layout
    before session 15), and directory_bits' 8-16 keys a bucket for every run. Nanoseconds
    a key, medians of ``runs`` batches after one untimed one."""
    from app.core import _index_kernels as kernels
    from app.core import _run_kernels as run_kernels
    from app.core.sorted_table import Run, directory_bits, merge_due, promotion_due

    rng = np.random.default_rng(SEED)

    def run_of(count: int) -> Run:
        keys = np.sort(rng.integers(0, 2**64 - 1, count, dtype=np.uint64)).reshape(1, -1)
        return Run(
            keys, rng.integers(0, max(1, count // 110), count).astype(np.int32).reshape(1, -1)
        )

    def directed(run: Run, bits: int | None) -> Run:
        if bits is None:
            return run
        directory = np.empty((1, (1 << bits) + 1), dtype=np.int64)
        run_kernels.build_directory(run.keys, directory)
        return Run(run.keys, run.rows, directory)

    main = run_of(entries)
    buffer = run_of(promotion_due(entries) or merge_due(entries))
    empty = Run.empty(1)
    tail = np.zeros((1, 256), np.uint64), np.zeros(256, np.int32)
    table = []
    for with_buffer in (False, True):
        for name, main_bits, buffer_bits in (
            ("no directory", None, None),
            ("2^16 buckets in main", 16, None),
            ("8-16 keys a bucket", directory_bits(len(main)), directory_bits(len(buffer))),
        ):
            first = directed(main, main_bits)
            second = directed(buffer, buffer_bits) if with_buffer else empty
            times = []
            for _ in range(runs + 1):
                keys = rng.integers(0, 2**64 - 1, 28_000, dtype=np.uint64)
                order = np.argsort(keys)
                started = time.perf_counter()
                runs_of = (
                    first.keys, first.rows, first.directory, empty.keys, empty.rows,
                    empty.directory, second.keys, second.rows, second.directory, *tail, 0,
                )  # fmt: skip
                kernels.equal_rows_many(
                    runs_of, 0, keys, order, 64, np.zeros(0, np.bool_), np.zeros(0, np.bool_)
                )
                times.append((time.perf_counter() - started) / len(keys) * 1e9)
            runs_text = f"main + buffer of {len(buffer):,}" if with_buffer else "main alone"
            table.append([runs_text, name, f"{statistics.median(times[1:]):,.0f}"])
    return (
        f"Passage lookups, {entries:,} entries in main, batches of 28,000 keys, {runs} "
        f"batches, medians:\n\n" + markdown_table(["runs", "directories", "ns a key"], table) + "\n"
    )


def http_inserts(documents: int, runs: int) -> str:
    """Batch inserts through the HTTP application (in process: TestClient, SQLite in a
    temporary data directory, every commit as the service makes it), passages off and on
    in turn, ``runs`` times: documents a second and their ratio."""
    import tempfile
    from pathlib import Path

    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    texts = english_like_texts(SEED, documents, 3000)
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(runs):
        for enabled in (False, True):
            with tempfile.TemporaryDirectory() as data:
                app = create_app(Settings(data_dir=Path(data)))
                with TestClient(app) as client:
                    if not app.state.ready.wait(120):
                        raise SystemExit(f"the app did not start: {app.state.startup_error}")
                    client.put("/v1/collections/c", json={"passages": {"enabled": enabled}})
                    started = time.perf_counter()
                    for at in range(0, documents, 256):
                        batch = [
                            {"id": f"d{at + i}", "text": text}
                            for i, text in enumerate(texts[at : at + 256])
                        ]
                        answer = client.post(
                            "/v1/collections/c/documents/batch", json={"documents": batch}
                        )
                        if answer.status_code != 200:
                            raise SystemExit(f"batch refused: {answer.text}")
                    rates[enabled].append(documents / (time.perf_counter() - started))
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    runs_text = ", ".join(
        f"{a:,.0f} / {b:,.0f}" for a, b in zip(rates[False], rates[True], strict=True)
    )
    return (
        f"{documents:,} documents of 3,000 characters in batches of 256 through the HTTP "
        f"application (TestClient, SQLite), {runs} runs (off / on: {runs_text}): "
        f"{off:,.0f} documents/s with passages off, {on:,.0f} with them on, "
        f"{on / off:.2f}x.\n"
    )


def against_ensemble(corpus: Corpus, setting: Setting, threshold: float = 0.8) -> str:
    """Containment queries: each story of a roundup, and as many stories in none, asked
    for the roundups that hold it (containment >= threshold). datasketch's
    MinHashLSHEnsemble (word 5-gram shingles, 128 permutations, 16 partitions, built once
    over the roundups) against the passage index over the same roundups (a roundup is
    found when the story's query_coverage is at least the threshold). Recall and
    precision of the (story, roundup) pairs, and the median time of a query."""
    from datasketch import MinHash, MinHashLSHEnsemble

    def shingles(text: str) -> set[bytes]:
        words = text.lower().split()
        return {" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)}

    def sketch(items: set[bytes]) -> MinHash:
        minhash = MinHash(num_perm=128)
        minhash.update_batch(list(items))
        return minhash

    roundups = [text for text, _ in corpus.roundups]
    inside = {m for _, members in corpus.roundups for m in members}
    rng = random.Random(SEED)
    outside = rng.sample([i for i in range(len(corpus.sources)) if i not in inside], len(inside))
    queries = sorted(inside) + outside
    truth = {(m, r) for r, (_, members) in enumerate(corpus.roundups) for m in members}
    ensemble = MinHashLSHEnsemble(threshold=threshold, num_perm=128, num_part=16)
    sets = [shingles(text) for text in roundups]
    ensemble.index([(r, sketch(s), len(s)) for r, s in enumerate(sets)])
    around = Searcher(roundups, setting)
    found: dict[str, set[tuple[int, int]]] = {"datasketch": set(), "passages": set()}
    times: dict[str, list[float]] = {"datasketch": [], "passages": []}
    for story in queries:
        text = corpus.sources[story]
        query_set = shingles(text)
        query_sketch = sketch(query_set)
        started = time.perf_counter()
        for r in ensemble.query(query_sketch, len(query_set)):
            found["datasketch"].add((story, int(r)))
        times["datasketch"].append(time.perf_counter() - started)
        started = time.perf_counter()
        tokens = tokenize(text)
        for r, passages in around.search(tokens).items():
            if coverage(passages, len(text)) >= threshold:
                found["passages"].add((story, r))
        times["passages"].append(time.perf_counter() - started)
    rows = []
    for name in ("datasketch", "passages"):
        hits = len(found[name] & truth)
        recall = hits / len(truth)
        precision = hits / len(found[name]) if found[name] else 1.0
        median_ms = statistics.median(times[name]) * 1e3
        rows.append([name, f"{recall:.1%}", f"{precision:.1%}", f"{median_ms:.2f}"])
    return (
        f"{len(queries)} stories asked for the roundups holding them ({len(truth)} true "
        f"pairs; {len(roundups)} roundups of {ROUNDUP_STORIES}), containment >= {threshold}:\n\n"
        + markdown_table(["", "recall", "precision", "median query ms"], rows)
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stories", type=int, default=200, help="sources planted per kind")
    parser.add_argument("--grid", action="store_true", help="every (k, window, minimum)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write docs")
    parser.add_argument(
        "--service",
        type=int,
        metavar="DOCUMENTS",
        help="instead: the default collection's CPU a search and an insert on real text, "
        "against passages off",
    )
    parser.add_argument("--runs", type=int, default=3, help="with --service")
    parser.add_argument(
        "--http",
        type=int,
        metavar="DOCUMENTS",
        help="instead: batch inserts through the HTTP application, passages off and on",
    )
    parser.add_argument(
        "--lookups",
        type=int,
        metavar="ENTRIES",
        help="instead: a batch's passage lookups in a main run of ENTRIES (and a buffer)",
    )
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="instead: containment queries against datasketch's MinHashLSHEnsemble",
    )
    arguments = parser.parse_args(argv)
    if arguments.service:
        print(service_costs(arguments.service, arguments.runs))
        return
    if arguments.http:
        print(http_inserts(arguments.http, arguments.runs))
        return
    if arguments.lookups:
        print(lookup_costs(arguments.lookups, max(arguments.runs, 5)))
        return
    stories = load_reuters()
    if stories is None:
        raise SystemExit("Reuters-21578 is not at ../shared/data/reuters21578: nothing to run")
    corpus = build(stories, arguments.stories, random.Random(SEED))
    if arguments.ensemble:
        print(against_ensemble(corpus, Setting(DEFAULT_K, DEFAULT_WINDOW, DEFAULT_MINIMUM)))
        return
    settings = [Setting(DEFAULT_K, DEFAULT_WINDOW, DEFAULT_MINIMUM)]
    if arguments.grid:
        settings = [
            Setting(k, w, m)
            for k in (4, 5, 6)
            for w in (4, 8, 12)
            for m in (8, 10, 12, 15)
            if m >= k
        ]
    kinds = [
        "cut", "light", "heavy", "non", "roundup: story found", "roundup: covered >= 85%",
        "roundup: offsets exact", "story: roundup found", "index bytes / document",
    ]  # fmt: skip
    rows = []
    for setting in settings:
        figures = evaluate(corpus, setting)
        micros = cost(corpus.sources[:2000], setting)
        rows.append(
            [str(setting)]
            + [f"{figures[k]:.0f}" if "bytes" in k else f"{figures[k]:.1%}" for k in kinds]
            + [f"{micros:.0f}"]
        )
        print(rows[-1], flush=True)
    table = markdown_table(["setting", *kinds, "µs / document"], rows)
    sizes = {kind: len(a) for kind, a in corpus.answers.items()}
    text = (
        "# Shared passages on Reuters (bench/passages.py)\n\n"
        f"{len(corpus.sources)} Reuters stories of at least {MIN_WORDS} words indexed; "
        f"answers per kind {sizes}; {len(corpus.roundups)} roundups of {ROUNDUP_STORIES} "
        f"stories. Found: among the passage matches of the query ({CANDIDATES} candidates "
        "verified). Generated by `python -m bench.passages"
        + (" --grid" if arguments.grid else "")
        + f" --stories {arguments.stories}`.\n\n"
        + table
        + "\n"
    )
    print(text)
    if not arguments.no_write:
        (REPO_ROOT / "docs" / "evaluation-passages.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
