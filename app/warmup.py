"""Compile every numba kernel of the service into numba's on-disk cache, ahead of time.

numba compiles a kernel on its first call, once for each combination of argument types,
and with ``cache=True`` keeps the machine code on disk (``__pycache__`` beside the source,
or ``NUMBA_CACHE_DIR``), keyed by the source's contents and the CPU. Compiling them all
takes far longer than loading them (docs/benchmarks.md, "Start-up and restarts"); ``neardup
warm-up`` pays it at set-up (``make run``, the Docker build) so that a start only loads
them. The kernels are reached through the service, on the
paths that requests and the start-up rebuild take, so that each is compiled for the types
those paths pass: a read-only array (documents read back from SQLite) is a type of its
own, and so is each kind of text (ASCII, other scripts, HTML). The kernels of
``neardup dedup``'s local engine (app/batch/_kernels.py) are reached the same way: the
engine run on a small corpus, with and without a match window.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from app.backends.embedded.collection import Collection
from app.backends.embedded.registry import Registry, warm_up
from app.collection_config import (
    CollectionConfig,
    MinHashConfig,
    NgramConfig,
    PassagesConfig,
    ShingleConfig,
    SimHashConfig,
)
from app.core._gram_kernels import at_least, at_most, prefix_length
from app.core.hosts import HOST_PAGES
from app.core.ngram import ORDER_FIRST_ROWS, NgramIndex, gram_sets
from app.core.page import read_page
from app.core.passages import PassageIndex
from app.core.sorted_table import MIN_DIRECTORY_ENTRIES
from app.service import InsertOptions, NewDocument, Query
from app.service.indexes import NgramMatcher
from app.storage.sqlite import SQLiteStore

log = logging.getLogger("neardup")

STORY = (
    "OPEC ministers agreed on Monday to cut crude oil output by 1.5 mln barrels a day "
    "from April, sending prices sharply higher in London and New York."
)
TEXTS = (
    STORY,
    STORY.replace("sharply", "a little"),  # a near-duplicate of the first
    "Short\ttext.",  # fewer words than a shingle
    "石油输出国组织部长周一同意从四月起每天减产一百五十万桶原油。",  # no spaces
    "Les ministres de l'OPEP ont décidé lundi de réduire la production de pétrole.",
)
HTML = "<html><body><p>OPEC ministers <b>agreed</b> on Monday</p><script>x()</script></body></html>"
# More documents than the unsorted tail of a table holds: a batch is sorted and merged.
BULK = tuple(" ".join(f"w{i}x{j}" for j in range(8)) for i in range(300))
# Pages of one site: the lines every page of it holds, and its address.
SITE = "https://news.example.com/story"
SITE_LINES = " ".join(f"sign up for our newsletter today{i} and read more" for i in range(6))
# A first batch of this many short texts learns the n-gram index's order of q-grams.
SHORT_ROWS = ORDER_FIRST_ROWS
# Every index and shingle kind a collection can have.
CONFIGS = {
    "word": CollectionConfig(),
    "char": CollectionConfig(shingle=ShingleConfig(unit="char", size=5)),
    "simhash": CollectionConfig(minhash=MinHashConfig(enabled=False)),
    "minhash": CollectionConfig(simhash=SimHashConfig(enabled=False), store_text=True),
    "passages": CollectionConfig(passages=PassagesConfig(enabled=True)),
}


def compile_kernels(helper: bool = True) -> float:
    """Run every kernel the service calls, on the types it calls them with; the seconds
    it took (numba loads what its cache holds, compiles and caches the rest).

    With ``helper`` and a second CPU, a second process compiles meanwhile, starting
    apart: it with the n-gram index (``warm_from_the_end``), this one with collections
    without short texts. Each loads what the other has cached by the time it gets there,
    and the cache takes their saves one at a time (app/core/kernel_cache.py). This
    process still walks every path, so the cache is complete whatever the helper did
    (docs/benchmarks.md, "What the kernels cost to compile", has the seconds)."""
    started = time.perf_counter()
    second = _start_helper() if helper and (os.cpu_count() or 1) > 1 else None
    try:
        with tempfile.TemporaryDirectory(prefix="neardup-warm-up-") as scratch:
            database = Path(scratch) / "warm-up.db"
            if second is not None:  # the kernels the helper does not start with, first
                warm_up(short_texts=False)
            warm_up()
            _passage_directories()
            _collections(database, CONFIGS.items())
            # A restart: the start-up rebuild from what SQLite gives back, then requests.
            registry = Registry(SQLiteStore(database, "NORMAL"))
            try:
                registry.open()
                for collection in registry.list():
                    _exercise(collection, "again")
            finally:
                registry.close()
            _dedup(Path(scratch))
    finally:
        if second is not None and second.wait() != 0:
            log.warning("neardup warm-up: the helper process exited with %s", second.returncode)
    return time.perf_counter() - started


def warm_from_the_end() -> None:
    """The helper's walk: the n-gram index's kernels (``_short_texts_index``), the batch
    job's, then the collection kinds in reverse order; ``compile_kernels`` starts with
    collections without short texts (``warm_up(short_texts=False)``)."""
    _short_texts_index()
    with tempfile.TemporaryDirectory(prefix="neardup-warm-up-helper-") as scratch:
        _dedup(Path(scratch))
        _collections(Path(scratch) / "warm-up.db", reversed(list(CONFIGS.items())))


def _short_texts_index() -> None:
    """The n-gram index as a default collection's NgramMatcher uses it (the costliest
    kernels, some 40% of the compile: the helper's first walk, while this process starts
    with everything else): a first batch that learns the order, single inserts, batch
    searches with and without the template rule, a batch's own pairs, a delete and the
    merge that rebuilds the order."""
    settings = NgramConfig()
    index = NgramMatcher(
        settings.threshold, settings.size, settings.cjk_size, settings.same_numbers
    ).index
    texts = [f"short {i} w{i % 97}" for i in range(SHORT_ROWS)]
    index.insert(texts, np.arange(SHORT_ROWS))
    queries = ["short 5 w5", "东京地震 5 人", "quake hits tokyo"]
    for row, text in enumerate(queries, SHORT_ROWS):
        index.insert([text], [row])
    for same_numbers in (True, False):
        index.search_many(queries, settings.threshold, same_numbers=same_numbers)
    batch = NgramIndex(
        settings.threshold,
        settings.size,
        learn_order=False,
        cjk_size=settings.cjk_size,
        same_numbers=settings.same_numbers,
    )
    batch.insert(queries, np.arange(len(queries)))
    batch.search_many(queries, settings.threshold)
    index.delete([0])
    index.merge()
    index.search_many(queries, settings.threshold)
    index.text(SHORT_ROWS)


def _passage_directories() -> None:
    """A table of 32-bit keys (the passage index's; the LSH index's are of the same types)
    past MIN_DIRECTORY_ENTRIES: its directory built, extended by the next batch, and a
    merge. A collection gets there after some 2,000 documents, too many for the
    collections walked here."""
    rng = np.random.default_rng(0)
    index = PassageIndex()
    index.insert_many(
        [rng.integers(0, 2**63, MIN_DIRECTORY_ENTRIES, dtype=np.uint64)], np.array([0])
    )
    index.insert_many([rng.integers(0, 2**63, 300, dtype=np.uint64)], np.array([1]))
    index.candidates(rng.integers(0, 2**63, 10, dtype=np.uint64))
    index.merge()


def _start_helper() -> subprocess.Popen[bytes] | None:
    """``warm_from_the_end`` in a new process (None where one cannot be started)."""
    code = "from app.warmup import warm_from_the_end; warm_from_the_end()"
    try:
        return subprocess.Popen([sys.executable, "-c", code])
    except OSError as error:
        log.warning("neardup warm-up: no helper process (%s); warming up alone", error)
        return None


def _collections(database: Path, configs: Iterable[tuple[str, CollectionConfig]]) -> None:
    """A collection of each (name, settings) in a new database, each exercised."""
    registry = Registry(SQLiteStore(database, "NORMAL"))
    try:
        registry.open()
        for name, config in configs:
            collection, _ = registry.create(name, config)
            _exercise(collection, "first")
    finally:
        registry.close()


def _dedup(scratch: Path) -> None:
    """``neardup dedup`` (local engine, in this process) on a corpus with every kind of
    pair: identical copies, near-duplicates, short texts; with and without a window."""
    from app.batch import local
    from app.batch.readers import Fields

    corpus = scratch / "corpus.jsonl"
    texts = [*TEXTS, TEXTS[0], TEXTS[1], TEXTS[2], *BULK[:20]]
    with corpus.open("w", encoding="utf-8") as handle:
        for number, text in enumerate(texts):
            record = {"id": number, "text": text, "time": 1_714_564_800 + 3600 * number}
            handle.write(json.dumps(record) + "\n")
    for config, timestamp_field, passages in (
        (CollectionConfig(), None, False),
        (CollectionConfig(match_window="2h"), "time", False),
        (CollectionConfig(), None, True),
    ):
        options = local.Options(
            out=scratch / "dedup",
            fields=Fields(timestamp_field=timestamp_field),
            workers=1,
            progress=False,
            passages=passages,
            drop_contained=passages,
        )
        local.run([str(corpus)], config, options)
    # The Redis store's n-gram sets, and the bounds it calls from Python on its floats.
    gram_sets(["quake hits tokyo", "东京地震"], 3, 2)
    prefix_length(14, 0.7, 2)
    at_least(0.7 * 14)
    at_most(14 / 0.7)


def _exercise(collection: Collection, prefix: str) -> None:
    """What requests do: inserts alone and in batches, searches, replacements, deletes,
    then a merge and the searches of the merged indexes."""
    ids = [f"{prefix}-{i}" for i in range(len(TEXTS))]
    collection.insert([NewDocument(TEXTS[0], ids[0])])
    collection.insert([NewDocument(TEXTS[3], ids[3])])
    batch = [NewDocument(TEXTS[i], ids[i]) for i in (1, 2, 4)]
    batch.append(NewDocument(TEXTS[1], f"{prefix}-again"))  # matches within the batch
    collection.insert(batch)
    page = read_page(HTML, collection.config.html.extract).text
    collection.insert([NewDocument(page, f"{prefix}-html")])
    collection.insert([NewDocument(TEXTS[0])], InsertOptions("skip"))
    collection.insert([NewDocument(TEXTS[2], ids[0])], InsertOptions(replace=True))
    collection.insert([NewDocument(text, f"{prefix}-bulk-{i}") for i, text in enumerate(BULK)])
    # Pages of one site (their host's chrome counted), and a first batch of short texts
    # large enough to learn the n-gram index's order from.
    collection.insert(
        [
            NewDocument(f"{SITE_LINES} page {i}", f"{prefix}-site-{i}", {"url": f"{SITE}/{i}"})
            for i in range(HOST_PAGES + 1)
        ]
    )
    if prefix == "first":
        collection.insert(
            [NewDocument(f"short {i} w{i % 97}", f"{prefix}-short-{i}") for i in range(SHORT_ROWS)]
        )
    for round_ in ("before", "after"):
        for text in TEXTS:
            collection.search(text, Query())
        collection.search(TEXTS[0], Query(limit=1, max_distance=0, min_similarity=0.5))
        collection.search(page, Query())
        collection.similar(ids[1], Query())
        collection.similar(ids[2], Query())  # a short text: read back from the n-gram index
        collection.get(ids[1])
        if round_ == "before":
            collection.delete(ids[4])
            collection.merge(force=True)  # drops the deleted row
