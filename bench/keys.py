"""What a scoped key costs a request: a search's p50 through HTTP with 1 and with 10,000
stored keys, and the key ring's lookup itself.

A real server process (embedded backend, an admin key) holds one collection of short
stories; a scoped key (``search`` on ``news-*``) sends the same searches, one at a time
over one keep-alive connection, first with that key alone in the store, then with 9,999
more (written in one transaction; the server's poll loads them). Each figure is the p50
of ``--searches`` searches, min / median / max over ``--runs`` runs.

    python -m bench.keys [--searches 2000] [--runs 5]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from app.backends.embedded.keys import KEYS_FILE, SQLiteKeyStore
from app.service.key_ring import KeyRing
from app.service.keys import Grant, configured_grant, digest, new_key_id, new_secret
from devkit.harness import (
    format_spread,
    latencies_us,
    markdown_table,
    percentile,
    spread,
    write_result,
)
from devkit.server import Server

ADMIN_KEY = "bench-keys-admin-key-0001"
STORED_KEYS = 10_000
DOCUMENTS = 500
WORDS = "river bank market price grain harvest shipping port rain storm city council vote".split()


def story(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(60))


def search_p50s(url: str, key: str, texts: list[str], runs: int) -> list[float]:
    """The p50 (us) of each run's searches."""
    p50s = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:

        def search(text: str) -> None:
            answer = client.post("/v1/collections/news-bench/search", json={"text": text})
            answer.raise_for_status()

        latencies_us(search, texts[:200])  # warm up
        for _ in range(runs):
            p50s.append(percentile(latencies_us(search, texts), 50))
    return p50s


def wait_for_keys(url: str, count: int, timeout: float = 60.0) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(httpx.get(f"{url}/v1/keys", headers=admin, timeout=60).json()["keys"]) >= count:
            return
    raise TimeoutError(f"the server did not load {count} keys")


def more_keys(count: int) -> list[Grant]:
    return [
        Grant(
            new_key_id(),
            f"tenant-{i}",
            frozenset({"search", "documents.add"}),
            (f"tenant-{i}-*",),
            digest=digest(new_secret().encode()),
        )
        for i in range(count)
    ]


def lookup_us(keys: int, rounds: int = 200_000) -> float:
    """The key ring's lookup of a stored key among ``keys``, in process (us a lookup)."""
    ring = KeyRing([configured_grant(digest(ADMIN_KEY.encode()), "write", 1)])
    secret = new_secret()
    mine = Grant("k", "k", frozenset({"search"}), ("*",), digest=digest(secret.encode()))
    grants = [*more_keys(keys - 1), mine]
    ring._stored = {grant.digest: grant for grant in grants}  # no store: the lookup alone
    token = secret.encode()
    started = time.perf_counter_ns()
    for _ in range(rounds):
        ring.lookup(token)
    return (time.perf_counter_ns() - started) / 1000 / rounds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args(argv)
    rng = random.Random(46)
    texts = [story(rng) for _ in range(arguments.searches)]
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        data_dir = Path(directory) / "data"
        with Server(data_dir, NEARDUP_API_KEYS=ADMIN_KEY, NEARDUP_LOG_LEVEL="warning") as server:
            admin_headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
            with httpx.Client(base_url=server.url, headers=admin_headers) as admin:
                admin.put("/v1/collections/news-bench").raise_for_status()
                for _ in range(0, DOCUMENTS, 50):
                    batch = {"documents": [{"text": story(rng)} for _ in range(50)]}
                    admin.post("/v1/collections/news-bench/documents/batch", json=batch)
                body = {"name": "bench", "actions": ["search"], "collections": ["news-*"]}
                key = admin.post("/v1/keys", json=body).json()["key"]
            alone = search_p50s(server.url, key, texts, arguments.runs)
            rows.append(["1", format_spread(spread(alone))])
            store = SQLiteKeyStore(data_dir / KEYS_FILE)
            store.save_many(more_keys(STORED_KEYS - 1))
            store.close()
            wait_for_keys(server.url, STORED_KEYS)
            among = search_p50s(server.url, key, texts, arguments.runs)
            rows.append([f"{STORED_KEYS:,}", format_spread(spread(among))])
    table = markdown_table(["stored keys", "search p50 through HTTP (min / median / max)"], rows)
    lookups = markdown_table(
        ["stored keys", "KeyRing.lookup, us"],
        [[f"{n:,}", f"{lookup_us(n):.2f}"] for n in (1, STORED_KEYS)],
    )
    report = f"{table}\n\n{lookups}\n"
    print(report)
    print(write_result("keys.md", report))


if __name__ == "__main__":
    main()
