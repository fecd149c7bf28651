"""What deciding MinHash by the texts near its threshold costs (``minhash.exact``).

Run ``.venv/bin/python -m bench.exact_minhash [--runs 5]``. In process, an embedded
Collection on a MemoryStore with the default settings, ``minhash.exact`` on and off,
one document at a time (the insert that pays for the texts it reads); runs alternate
between the two settings and the medians are compared:

- *Reuters*: the 21,578 stories in date order (few pairs near the threshold);
- *near-duplicate clusters* (the worst case): 3 KB stories, each re-posted 20 times with
  1-3% of its words replaced, so that nearly every version is a MinHash candidate of
  every earlier one with an estimate in the band the texts decide (0.65-0.95), in a
  shuffled order;
- *distinct*: 3 KB stories unlike each other (the usual insert: no candidate).

Also counts the pairs the texts decided and those whose verdict they changed. Writes
bench/results/exact_minhash.md (figures go to docs/benchmarks.md by hand).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig, MinHashConfig
from app.core import verify
from app.core.lsh import min_matches
from app.core.methods import MINHASH
from app.service import NewDocument
from app.storage import MemoryStore
from devkit.corpus import english_like_texts, mutate_words
from devkit.harness import cpu_model_name, load_reuters, markdown_table, reuters_text, write_result

VERSIONS = 20
STORIES = 150


def near_duplicate_clusters(seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for base in english_like_texts(seed, STORIES, 3000):
        texts.append(base)
        texts += [mutate_words(rng, base, rng.uniform(0.01, 0.03)) for _ in range(VERSIONS - 1)]
    rng.shuffle(texts)
    return texts


class Counted:
    """Counts the pairs ExactMinHash decides and those whose verdict the texts changed."""

    def __init__(self) -> None:
        self.decided = 0
        self.changed = 0
        self._decide = verify.ExactMinHash.decide

    def __enter__(self) -> Counted:
        counter, original = self, self._decide

        def decide(self: verify.ExactMinHash, *args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            methods, agree = args[2], args[3]
            unsure = verify.unsure_pairs(methods, agree, self.bar, self.num_perm)
            bits, similarity = original(self, *args)
            counter.decided += len(unsure)
            by_estimate = agree[unsure] >= min_matches(self.bar, self.num_perm)
            by_texts = (bits[unsure] & MINHASH) != 0
            counter.changed += int(np.count_nonzero(by_estimate != by_texts))
            return bits, similarity

        verify.ExactMinHash.decide = decide  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        verify.ExactMinHash.decide = self._decide  # type: ignore[method-assign]


def insert_rate(texts: list[str], exact: bool) -> float:
    config = CollectionConfig(minhash=MinHashConfig(exact=exact))
    store = MemoryStore()
    store.create_collection("c", config.to_dict())
    collection = Collection("c", config, store)
    started = time.perf_counter()
    for number, text in enumerate(texts):
        collection.insert([NewDocument(text, f"d{number}")])
    return len(texts) / (time.perf_counter() - started)


def measure(name: str, texts: list[str], runs: int) -> list[str]:
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(runs):
        for exact in (False, True):
            rates[exact].append(insert_rate(texts, exact))
    with Counted() as counted:
        insert_rate(texts, True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"{name}: exact {on:,.0f}/s, estimate {off:,.0f}/s", flush=True)
    return [
        name,
        f"{len(texts):,}",
        f"{off:,.0f}",
        f"{on:,.0f}",
        f"{on / off:.2f}",
        f"{counted.decided:,}",
        f"{counted.changed:,}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    workloads: list[tuple[str, Callable[[], list[str]]]] = [
        ("near-duplicate clusters", lambda: near_duplicate_clusters(1)),
        ("distinct 3 KB stories", lambda: english_like_texts(2, STORIES * VERSIONS, 3000)),
    ]
    stories = load_reuters()
    if stories is None:
        print("Reuters-21578 is not in ../shared/data: its row is left out")
    else:
        workloads.insert(0, ("Reuters, date order", lambda: [reuters_text(s) for s in stories]))
    rows = [measure(name, make(), arguments.runs) for name, make in workloads]
    table = markdown_table(
        [
            "stream",
            "documents",
            "estimate, docs/s",
            "exact, docs/s",
            "ratio",
            "pairs decided by texts",
            "verdicts changed",
        ],
        rows,
    )
    text = (
        f"Single inserts in process, medians of {arguments.runs} alternating runs; "
        f"{cpu_model_name()}, no core pinning.\n\n{table}\n"
    )
    print(text)
    write_result("exact_minhash.md", text)


if __name__ == "__main__":
    main()
