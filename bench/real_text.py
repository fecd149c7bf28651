"""The default collection on real text, over HTTP, against the same collection with shared
passages off and a bare FastAPI app, all measured in one run.

    .venv/bin/python -m bench.real_text [--documents 20000] [--runs 3] [--pin]

Texts (../shared/data/reuters21578; skipped with a message where it is absent): Reuters
stories of 60 words or more, and the same stories joined and cut to ~3 KB (2 to 5 of
them a text), which share passages as news does (wire copy, roundups, updates). Texts of
random words never share a passage and hide what verification costs.

For each corpus, one ``neardup serve`` holds a collection with the default settings and
one with ``{"passages": {"enabled": false}}``; bench/bare_app.py (the service's models,
no work) is the ceiling. Each run measures, per collection:

- batch inserts/s: the corpus in batches of 250 from one client;
- RSS: the server's growth a document over that insert;
- searches/s and p50 at 16 connections (wrk, 2 threads): 512 bodies, each a stored text
  (it finds itself and what shares passages with it), against the bare app's searches;
- single inserts/s at 16 connections (wrk): new texts of the same kind, against the bare
  app's inserts.

Medians of ``--runs``; ratios are of figures taken in the same run. ``--pin`` puts the
servers on core 0 and wrk on core 1 (the unpinned figure is what a user sees: give both).
Writes bench/results/real_text.md.

``--redis``: instead, the Redis backend (a local redis-server without persistence, one
``neardup serve`` over it): the Reuters stories in batches of 250 into a collection at
the defaults and one with passages off, batch inserts/s, Redis's used_memory a
document and the median time of a search by each of 512 stored stories, one at a time
(bench/results/real_text_redis.md).

``--memory N``: instead, N texts of about 1 KB (a window of two Reuters stories joined,
so that each story stands in many: a stress of shared passages) in batches of 250 into
a collection at the defaults and one with passages off, each in a fresh ``neardup
serve``: inserts/s and the server's RSS growth a document right after the last batch
and 4 s later, once the merger has given back the heap the burst freed (its idle trim,
app/memory.py) (bench/results/real_text_memory.md).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from devkit.harness import (
    load_reuters,
    markdown_table,
    pin_process,
    reuters_text,
    rss_bytes,
    write_result,
)
from devkit.redis_peer import used_memory
from devkit.redis_servers import start_server
from devkit.server import Server, bare_app, neardup
from devkit.wrk import SEARCH_LUA, run_wrk

SETTINGS = {"defaults": {}, "passages off": {"passages": {"enabled": False}}}
BATCH = 250
BODIES = 512
CLIENTS = 16
INSERT_LUA = """
local bodies = {}
for line in io.lines("%s") do bodies[#bodies + 1] = line end
local counter = 0
local thread_number = 0
setup = function(thread) thread:set("number", thread_number); thread_number = thread_number + 1 end
request = function()
  counter = counter + 1
  local body = bodies[((counter * 2 + number) %% #bodies) + 1]
  return wrk.format("POST", "%s", {["Content-Type"] = "application/json"}, body)
end
"""


def corpora(documents: int, seed: int) -> dict[str, list[str]] | None:
    """Reuters stories of 60+ words (as many as there are, up to ``documents``) and
    ``documents`` texts of 2-5 of them joined and cut to ~3 KB."""
    loaded = load_reuters()
    if loaded is None:
        return None
    rng = random.Random(seed)
    stories = [reuters_text(s) for s in loaded if len((s.get("body") or "").split()) >= 60]
    rng.shuffle(stories)
    joined = ["\n\n".join(rng.sample(stories, rng.randint(2, 5)))[:3000] for _ in range(documents)]
    return {"Reuters stories": stories[:documents], "stories joined to 3 KB": joined}


def bodies_file(root: Path, name: str, bodies: list[dict[str, object]]) -> Path:
    path = root / f"{name}.jsonl"
    path.write_text("".join(json.dumps(body) + "\n" for body in bodies), encoding="utf-8")
    return path


def wrk_rate(
    url: str, lua: str, path: Path, route: str, cpu: int | None, seconds: int
) -> tuple[float, float]:
    """(requests/s, p50 ms) of wrk posting the bodies of ``path`` to ``route``."""
    script = path.with_suffix(".lua")
    script.write_text(lua % (path, route), encoding="utf-8")
    run = run_wrk(url, clients=CLIENTS, duration=seconds, script=script, cpu=cpu)
    if run.errors:
        raise RuntimeError(f"{run.errors} failed requests to {route}")
    return run.requests_per_second, run.p50_ms


def one_run(
    texts: dict[str, list[str]], fresh: dict[str, list[str]], pin: bool, seconds: float
) -> dict[str, float]:
    """Every figure of one run, keyed "corpus|setting|measure" (setting "bare" for the app)."""
    figures: dict[str, float] = {}
    cpu = 1 if pin else None
    with tempfile.TemporaryDirectory(prefix="real-text-") as scratch:
        root = Path(scratch)
        searches = {
            c: bodies_file(root, f"search-{n}", [{"text": t} for t in texts[c][:BODIES]])
            for n, c in enumerate(texts)
        }
        inserts = {
            c: bodies_file(root, f"insert-{n}", [{"text": t} for t in fresh[c]])
            for n, c in enumerate(texts)
        }
        with bare_app() as bare:
            if pin:
                pin_process(bare.pid, {0})
            for corpus in texts:
                rate, p50 = wrk_rate(
                    bare.url, SEARCH_LUA, searches[corpus], "/v1/collections/c/search", cpu, seconds
                )
                figures[f"{corpus}|bare|search/s"], figures[f"{corpus}|bare|search p50"] = rate, p50
                rate, _ = wrk_rate(
                    bare.url,
                    INSERT_LUA,
                    inserts[corpus],
                    "/v1/collections/c/documents",
                    cpu,
                    seconds,
                )
                figures[f"{corpus}|bare|single/s"] = rate
        for corpus, stored in texts.items():
            for setting, body in SETTINGS.items():
                with neardup(synchronous="NORMAL") as server:
                    if pin:
                        pin_process(server.pid, {0})
                    key = f"{corpus}|{setting}"
                    with httpx.Client(base_url=server.url, timeout=300, trust_env=False) as client:
                        assert client.put("/v1/collections/c", json=body).status_code == 201
                        before = rss_bytes(server.pid)
                        figures[f"{key}|batch/s"] = insert_batches(client, "c", stored)
                        figures[f"{key}|rss B/doc"] = (rss_bytes(server.pid) - before) / len(stored)
                    rate, p50 = wrk_rate(
                        server.url,
                        SEARCH_LUA,
                        searches[corpus],
                        "/v1/collections/c/search",
                        cpu,
                        seconds,
                    )
                    figures[f"{key}|search/s"], figures[f"{key}|search p50"] = rate, p50
                    rate, _ = wrk_rate(
                        server.url,
                        INSERT_LUA,
                        inserts[corpus],
                        "/v1/collections/c/documents",
                        cpu,
                        seconds,
                    )
                    figures[f"{key}|single/s"] = rate
    return figures


def insert_batches(client: httpx.Client, collection: str, texts: list[str]) -> float:
    """Documents/s of ``texts`` posted in batches of BATCH from one client."""
    started = time.perf_counter()
    for at in range(0, len(texts), BATCH):
        chunk = [{"id": f"d{at + i}", "text": t} for i, t in enumerate(texts[at : at + BATCH])]
        answer = client.post(
            f"/v1/collections/{collection}/documents/batch", json={"documents": chunk}
        )
        answer.raise_for_status()
    return len(texts) / (time.perf_counter() - started)


def redis_run(stories: list[str]) -> dict[str, float]:
    """One run over Redis: "setting|batch/s" and "setting|redis B/doc" of each setting."""
    import redis

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="real-text-redis-") as scratch:
        root = Path(scratch)
        server = start_server(root / "redis")  # no persistence: the layout, not the disk
        try:
            store = redis.Redis.from_url(server.url)
            with (
                Server(
                    root / "data", NEARDUP_BACKEND=server.url, NEARDUP_LOG_LEVEL="warning"
                ) as service,
                httpx.Client(base_url=service.url, timeout=300, trust_env=False) as client,
            ):
                for number, (setting, body) in enumerate(SETTINGS.items()):
                    name = f"c{number}"
                    assert client.put(f"/v1/collections/{name}", json=body).status_code == 201
                    before = used_memory(store)
                    figures[f"{setting}|batch/s"] = insert_batches(client, name, stories)
                    figures[f"{setting}|redis B/doc"] = (used_memory(store) - before) / len(stories)
                    figures[f"{setting}|search ms"] = search_p50(client, name, stories[:BODIES])
            store.close()
        finally:
            server.stop()
    return figures


def search_p50(client: httpx.Client, collection: str, texts: list[str]) -> float:
    """The median milliseconds of a search by each text (stored ones: each finds itself
    and what shares passages with it), one at a time from one client."""
    took = []
    for text in texts:
        started = time.perf_counter()
        client.post(f"/v1/collections/{collection}/search", json={"text": text}).raise_for_status()
        took.append(time.perf_counter() - started)
    return 1000 * statistics.median(took)


def redis_report(runs: list[dict[str, float]], documents: int) -> str:
    def median(key: str) -> float:
        return statistics.median(run[key] for run in runs)

    def ratio(measure: str) -> str:
        key, under = f"defaults|{measure}", f"passages off|{measure}"
        return f"{statistics.median(run[key] / run[under] for run in runs):.2f}x"

    rows = [
        [
            f"Reuters stories ({documents:,})",
            f"{median('defaults|batch/s'):,.0f} / {median('passages off|batch/s'):,.0f} "
            f"({ratio('batch/s')})",
            f"{median('defaults|redis B/doc'):,.0f} / {median('passages off|redis B/doc'):,.0f} "
            f"({ratio('redis B/doc')})",
            f"{median('defaults|search ms'):.2f} / {median('passages off|search ms'):.2f}",
        ]
    ]
    header = [
        "corpus (documents)",
        "batch inserts/s: defaults / off",
        "Redis B/doc: defaults / off",
        f"search p50 ms, one client ({BODIES} stored texts): defaults / off",
    ]
    return (
        f"# The default collection on real text over Redis ({len(runs)} runs, medians)\n\n"
        "`python -m bench.real_text --redis`\n\n" + markdown_table(header, rows) + "\n"
    )


def memory_run(documents: int, chars: int = 1000) -> str:
    """``--memory``: inserts/s and RSS B/doc, right after and settled, at the defaults
    and with passages off; each text a window of ``chars`` characters of stories joined."""
    loaded = load_reuters()
    assert loaded is not None
    rng = random.Random(3)
    stories = [reuters_text(s) for s in loaded if len((s.get("body") or "").split()) >= 20]
    texts = []
    for number in range(documents):
        joined = "\n\n".join(rng.sample(stories, 2 + chars // 1500))
        start = rng.randrange(0, max(1, len(joined) - chars))
        texts.append(f"{number} {joined[start : start + chars]}")
    lines = [
        f"{documents:,} texts of {sum(map(len, texts)) // documents:,} characters on average",
        "",
        "| setting | inserts/s | RSS B/doc right after | RSS B/doc 4 s later |",
        "| --- | --: | --: | --: |",
    ]
    for setting, body in SETTINGS.items():
        with (
            neardup(synchronous="NORMAL") as server,
            httpx.Client(base_url=server.url, timeout=600, trust_env=False) as client,
        ):
            assert client.put("/v1/collections/c", json=body).status_code == 201
            before = rss_bytes(server.pid)
            rate = insert_batches(client, "c", texts)
            after = rss_bytes(server.pid)
            time.sleep(4)  # the merger's idle trim: two quiet polls of a second
            settled = rss_bytes(server.pid)
        lines.append(
            f"| {setting} | {rate:,.0f} | {(after - before) / documents:,.0f} "
            f"| {(settled - before) / documents:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def report(
    runs: list[dict[str, float]], arguments: argparse.Namespace, sizes: dict[str, int]
) -> str:
    """One table: medians, and the medians of each run's ratios."""

    def value(corpus: str, setting: str, measure: str, digits: int = 0) -> str:
        median = statistics.median(run[f"{corpus}|{setting}|{measure}"] for run in runs)
        return f"{median:,.{digits}f}"

    def ratio(corpus: str, measure: str, over: str) -> str:
        key, under = f"{corpus}|defaults|{measure}", f"{corpus}|{over}|{measure}"
        return f"{statistics.median(run[key] / run[under] for run in runs):.2f}x"

    rows = []
    for corpus, size in sizes.items():
        both = [value(corpus, s, "batch/s") for s in ("defaults", "passages off")]
        searches = [value(corpus, s, "search/s") for s in ("defaults", "passages off", "bare")]
        singles = [value(corpus, s, "single/s") for s in ("defaults", "passages off", "bare")]
        rows.append(
            [
                f"{corpus} ({size:,})",
                f"{' / '.join(both)} ({ratio(corpus, 'batch/s', 'passages off')})",
                f"{' / '.join(searches)} ({ratio(corpus, 'search/s', 'passages off')} off, "
                f"{ratio(corpus, 'search/s', 'bare')} bare)",
                " / ".join(value(corpus, s, "search p50", 2) for s in ("defaults", "passages off")),
                f"{' / '.join(singles)} ({ratio(corpus, 'single/s', 'bare')} bare)",
                " / ".join(value(corpus, s, "rss B/doc") for s in ("defaults", "passages off")),
            ]
        )
    header = [
        "corpus (documents)",
        "batch inserts/s: defaults / off",
        "searches/s at 16: defaults / off / bare",
        "search p50 ms: defaults / off",
        "single inserts/s at 16: defaults / off / bare",
        "RSS B/doc: defaults / off",
    ]
    pinned = "server on core 0, wrk on core 1" if arguments.pin else "unpinned"
    command = f"python -m bench.real_text --documents {arguments.documents} --runs {arguments.runs}"
    return (
        f"# The default collection on real text ({len(runs)} runs, medians; {pinned})\n\n"
        f"`{command}{' --pin' if arguments.pin else ''}`\n\n" + markdown_table(header, rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5, help="each wrk run")
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--redis", action="store_true", help="the Redis backend's inserts")
    parser.add_argument("--memory", type=int, metavar="N", help="instead: RSS at N 1 KB texts")
    parser.add_argument("--chars", type=int, default=1000, help="--memory: characters a text")
    arguments = parser.parse_args()
    if arguments.memory:
        if load_reuters() is None:
            print("bench.real_text: ../shared/data/reuters21578 is absent: nothing measured")
            sys.exit(0)
        text = memory_run(arguments.memory, arguments.chars)
        print(text)
        name = (
            "real_text_memory.md"
            if arguments.chars == 1000
            else f"real_text_memory_{arguments.chars}.md"
        )
        print(f"written to {write_result(name, text)}")
        return
    texts = corpora(arguments.documents, 7)
    if texts is None:
        print("bench.real_text: ../shared/data/reuters21578 is absent: nothing measured")
        sys.exit(0)
    if arguments.redis:
        stories = texts["Reuters stories"]
        redis_runs = []
        for number in range(arguments.runs):
            redis_runs.append(redis_run(stories))
            print(f"run {number + 1}: {json.dumps(redis_runs[-1])}", flush=True)
        text = redis_report(redis_runs, len(stories))
        print(text)
        print(f"written to {write_result('real_text_redis.md', text)}")
        return
    fresh = corpora(4 * BODIES, 8)
    assert fresh is not None
    runs = []
    for number in range(arguments.runs):
        runs.append(one_run(texts, fresh, arguments.pin, arguments.seconds))
        print(
            f"run {number + 1}: {json.dumps({k: round(v, 2) for k, v in runs[-1].items()})}",
            flush=True,
        )
    text = report(runs, arguments, {corpus: len(t) for corpus, t in texts.items()})
    print(text)
    print(f"written to {write_result('real_text.md', text)}")


if __name__ == "__main__":
    main()
