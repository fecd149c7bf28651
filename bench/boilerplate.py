"""A text near very many stored ones, through HTTP at the default settings: what a search
and an insert cost where boilerplate, not content, makes the pairs.

    .venv/bin/python -m bench.boilerplate [--pages 3000] [--runs 3]

Texts are Reuters words (../shared/data/reuters21578; skipped with a message where it is
absent), so that what is shared is real vocabulary:

- **a site's template**: ``--pages`` pages, each 150 words of its own (sampled from the
  stories) and one footer of 400 words that every page repeats, inserted in batches of
  500 (each batch timed: a batch should not slow as the site grows); then searches by
  the footer alone (near every page: exact Jaccard ~0.74 around the 0.8 threshold, so
  each pair is one MinHash decides by the texts) and by a page;
- **a sentence repeated**: one sentence of 9 words 20,000 times inserted, then the same
  text and a word more (its copy shares every shift of the sentence), and a search by
  it with ``min_coverage`` 0 (every shared passage asked for);
- **copies in one batch**: 1,000 copies of one story in one batch request (every two of
  them a pair: 499,500), then 1,000 versions of another with one word replaced each.

Each run starts a fresh ``neardup serve``; medians of ``--runs``, with each answer's size
(the passages of the repeated text are in it). Writes bench/results/boilerplate.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

import httpx

from devkit.harness import load_reuters, markdown_table, reuters_text, write_result
from devkit.server import neardup

FOOTER_WORDS = 400
OWN_WORDS = 150
BATCH = 500
SENTENCE = "the quick brown fox jumps over the lazy dog "
REPEATS = 20_000
COPIES = 1000


def timed(client: httpx.Client, method: str, path: str, body: Any) -> tuple[float, int]:
    """(milliseconds, bytes of the answer) of one request, which must succeed."""
    started = time.perf_counter()
    response = client.request(method, path, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed, len(response.content)


def one_run(
    words: list[str], stories: list[str], pages: int, seed: int
) -> dict[str, tuple[float, int]]:
    """Every measure of one run on a fresh service: name -> (ms, answer bytes)."""
    rng = random.Random(seed)
    footer = " ".join(words[:FOOTER_WORDS])
    texts = [" ".join(rng.sample(words, OWN_WORDS)) + " " + footer for _ in range(pages)]
    found: dict[str, tuple[float, int]] = {}
    with (
        neardup(synchronous="NORMAL") as server,
        httpx.Client(base_url=server.url, timeout=600, trust_env=False) as client,
    ):
        client.put("/v1/collections/site", json={}).raise_for_status()
        batches = []
        for start in range(0, pages, BATCH):
            documents = [
                {"id": f"p{start + i}", "text": text}
                for i, text in enumerate(texts[start : start + BATCH])
            ]
            batches.append(
                timed(
                    client, "POST", "/v1/collections/site/documents/batch", {"documents": documents}
                )
            )
        found["template: first batch of 500"] = batches[0]
        found["template: last batch of 500"] = batches[-1]
        search = "/v1/collections/site/search"
        found["template: search by the footer"] = timed(client, "POST", search, {"text": footer})
        found["template: search by a page"] = timed(client, "POST", search, {"text": texts[7]})
        repeated = SENTENCE * REPEATS
        documents = "/v1/collections/site/documents"
        found["repeated: insert"] = timed(
            client, "POST", documents, {"id": "repeated", "text": repeated}
        )
        found["repeated: insert its copy and a word"] = timed(
            client, "POST", documents, {"id": "again", "text": repeated + "end"}
        )
        found["repeated: search, every passage"] = timed(
            client, "POST", search, {"text": repeated, "min_coverage": 0}
        )
        batch = "/v1/collections/site/documents/batch"
        story, other = stories[0], stories[1].split()
        copies = [{"id": f"copy{i}", "text": story} for i in range(COPIES)]
        found["copies: a batch of 1,000 copies"] = timed(
            client, "POST", batch, {"documents": copies}
        )
        versions = []
        for i in range(COPIES):
            words = list(other)
            words[rng.randrange(len(words))] = rng.choice(other)
            versions.append({"id": f"version{i}", "text": " ".join(words)})
        found["copies: a batch of 1,000 versions"] = timed(
            client, "POST", batch, {"documents": versions}
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    stories = load_reuters()
    if stories is None:
        print("skipped: ../shared/data/reuters21578 is absent", file=sys.stderr)
        return
    texts = [reuters_text(story) for story in stories[:3000]]
    words = " ".join(texts).split()
    long_ones = [text for text in texts if len(text.split()) >= 200]
    runs = [one_run(words, long_ones, arguments.pages, seed) for seed in range(arguments.runs)]
    rows = []
    for name in runs[0]:
        times = [run[name][0] for run in runs]
        rows.append(
            [
                name,
                f"{statistics.median(times):,.1f}",
                f"{min(times):,.1f}-{max(times):,.1f}",
                f"{statistics.median(run[name][1] for run in runs):,.0f}",
            ]
        )
    table = markdown_table(
        ["measure", "ms (median)", "runs", "answer bytes"],
        rows,
        ["left", "right", "right", "right"],
    )
    report = (
        f"# Boilerplate near-duplicates ({arguments.pages} pages, {arguments.runs} runs)\n\n"
        f"{table}\n"
    )
    print(report)
    print(f"written to {write_result('boilerplate.md', report)}")


if __name__ == "__main__":
    main()
