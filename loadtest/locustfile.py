"""The two real workloads of neardup as locust users.

    .venv/bin/locust -f loadtest/locustfile.py --headless -u 16 -r 16 -t 60s \\
        --host http://127.0.0.1:8000 CrawlerUser ReaderUser

(``python -m loadtest.run`` starts a server, preloads it and runs this for you.)

CrawlerUser inserts what a crawler fetches: single documents and batches of 16 and 256.
About 20% of its documents are near-duplicates (one random word changed) of an earlier
document (one it inserted, or a preloaded ``pre-{i}``); the rest are distinct texts from
devkit/documents.py. ReaderUser searches by text (about 3 KB; a fraction of them
near-duplicates of preloaded documents, so that searches find something) and asks for the
neighbours of documents known to exist (``pre-{i}`` and this process's recent inserts).

Request names carry the documents per request ("insert x16"), so run.py can turn
requests/s into documents/s. Every id starts with a random prefix drawn per user, so ids
stay unique across users, processes and runs.

Environment (defaults in brackets):
    NEARDUP_LT_PRELOADED [0]            documents pre-0 .. pre-(N-1) present in the service
    NEARDUP_LT_PREFIX [pre]             their id prefix
    NEARDUP_LT_COLLECTION [default]
    NEARDUP_LT_DOC_CHARS [3000]         characters per inserted document (0: natural length)
    NEARDUP_LT_PRELOAD_CHARS [DOC_CHARS] characters per preloaded document (preload.py's)
    NEARDUP_LT_SEARCH_CHARS [3000]      characters per search text (near-duplicates of
                                        pre-{i} have PRELOAD_CHARS)
    NEARDUP_LT_DUP_FRACTION [0.2]       inserted documents that are near-duplicates
    NEARDUP_LT_SEARCH_DUP_FRACTION [0.2] searches that are near-duplicates of pre-{i}
    NEARDUP_LT_W_INSERT [10], NEARDUP_LT_W_BATCH16 [3], NEARDUP_LT_W_BATCH256 [1]
    NEARDUP_LT_W_SEARCH [3], NEARDUP_LT_W_SIMILAR [1]     task weights
    NEARDUP_LT_CRAWLER_WEIGHT [1], NEARDUP_LT_READER_WEIGHT [1]  user mix when both run
    NEARDUP_LT_WAIT [0]                 seconds a user waits between tasks (0: closed loop)
"""

from __future__ import annotations

import os
import random
import secrets
from collections import deque

import gevent
import orjson
from locust import FastHttpUser, constant, task

from devkit.documents import DEFAULT_CHARS, load_corpus


def _integer(name: str, default: int) -> int:
    return int(os.environ.get(f"NEARDUP_LT_{name}", default))


def _number(name: str, default: float) -> float:
    return float(os.environ.get(f"NEARDUP_LT_{name}", default))


PRELOADED = _integer("PRELOADED", 0)
PRELOAD_PREFIX = os.environ.get("NEARDUP_LT_PREFIX", "pre")
COLLECTION = os.environ.get("NEARDUP_LT_COLLECTION", "default")
DOC_CHARS = _integer("DOC_CHARS", DEFAULT_CHARS)
PRELOAD_CHARS = _integer("PRELOAD_CHARS", DOC_CHARS)
SEARCH_CHARS = _integer("SEARCH_CHARS", DEFAULT_CHARS)
DUP_FRACTION = _number("DUP_FRACTION", 0.2)
SEARCH_DUP_FRACTION = _number("SEARCH_DUP_FRACTION", 0.2)
WAIT_SECONDS = _number("WAIT", 0.0)

DOCUMENTS = f"/v1/collections/{COLLECTION}/documents"
SEARCH = f"/v1/collections/{COLLECTION}/search"
JSON_HEADERS = {"content-type": "application/json"}
# Bodies are bytes from orjson: geventhttpclient sends them as they are, though locust's
# annotation says str or dict (hence the type: ignore on the posts).
NEW_KEYS = 1 << 62  # keys of new documents; preloaded ones are 0 .. PRELOADED-1
RECENT = 4096

# Loaded once per process, before locust forks (--processes): the children share it.
CORPUS = load_corpus()
# Loading takes seconds; gevent's loop clock is cached since the hub was made, and locust
# schedules the end of the run (-t) from it: without this, the run would end that much early.
gevent.get_hub().loop.update_now()
# Ids inserted by this process's crawlers: readers ask for their neighbours too.
RECENT_IDS: deque[str] = deque(maxlen=RECENT)


class _Workload(FastHttpUser):
    abstract = True
    wait_time = constant(WAIT_SECONDS)

    def on_start(self) -> None:
        # Drawn from the OS in each user (after any fork): unique across processes and runs.
        self.rng = random.Random(secrets.randbits(64))
        self.id_prefix = f"lt-{secrets.token_hex(6)}"
        self.sent = 0
        self.inserted_keys: deque[int] = deque(maxlen=RECENT)

    def preloaded_key(self) -> int | None:
        return self.rng.randrange(PRELOADED) if PRELOADED else None


class CrawlerUser(_Workload):
    """Inserts: single documents and batches of 16 and 256, ~20% near-duplicates."""

    weight = _integer("CRAWLER_WEIGHT", 1)

    def documents(self, count: int) -> tuple[list[dict[str, str]], list[int]]:
        """Documents to send, and the keys of the new (not near-duplicate) ones."""
        documents, new_keys = [], []
        for _ in range(count):
            self.sent += 1
            source = self.duplicate_source() if self.rng.random() < DUP_FRACTION else None
            if source is None:
                key = NEW_KEYS + self.rng.getrandbits(61)
                new_keys.append(key)
                text = CORPUS.document(key, DOC_CHARS)
            else:
                text = CORPUS.near_duplicate(CORPUS.document(*source), self.rng)
            documents.append({"id": f"{self.id_prefix}-{self.sent}", "text": text})
        return documents, new_keys

    def duplicate_source(self) -> tuple[int, int] | None:
        """(key, chars) of an earlier document: one this user inserted, or a preloaded one."""
        if self.inserted_keys and (not PRELOADED or self.rng.random() < 0.5):
            return self.rng.choice(self.inserted_keys), DOC_CHARS
        key = self.preloaded_key()
        return None if key is None else (key, PRELOAD_CHARS)

    def send(
        self, path: str, body: object, name: str, sent: tuple[list[dict[str, str]], list[int]]
    ) -> None:
        data = orjson.dumps(body)
        response = self.client.post(path, data=data, headers=JSON_HEADERS, name=name)  # type: ignore[arg-type]
        if response.status_code in (200, 201):  # only stored documents are asked for later
            documents, new_keys = sent
            RECENT_IDS.extend(document["id"] for document in documents)
            self.inserted_keys.extend(new_keys)

    def insert_batch(self, size: int) -> None:
        sent = self.documents(size)
        self.send(f"{DOCUMENTS}/batch", {"documents": sent[0]}, f"insert x{size}", sent)

    @task(_integer("W_INSERT", 10))
    def insert_one(self) -> None:
        sent = self.documents(1)
        self.send(DOCUMENTS, sent[0][0], "insert x1", sent)

    @task(_integer("W_BATCH16", 3))
    def insert_16(self) -> None:
        self.insert_batch(16)

    @task(_integer("W_BATCH256", 1))
    def insert_256(self) -> None:
        self.insert_batch(256)


class ReaderUser(_Workload):
    """Reads: search by a ~3 KB text, and neighbours of a document known to exist."""

    weight = _integer("READER_WEIGHT", 1)

    @task(_integer("W_SEARCH", 3))
    def search(self) -> None:
        source = self.preloaded_key() if self.rng.random() < SEARCH_DUP_FRACTION else None
        if source is None:
            text = CORPUS.document(NEW_KEYS + self.rng.getrandbits(61), SEARCH_CHARS)
        else:
            text = CORPUS.near_duplicate(CORPUS.document(source, PRELOAD_CHARS), self.rng)
        body = orjson.dumps({"text": text, "limit": 10})
        self.client.post(SEARCH, data=body, headers=JSON_HEADERS, name="search")  # type: ignore[arg-type]

    @task(_integer("W_SIMILAR", 1))
    def similar(self) -> None:
        key = self.preloaded_key()
        if RECENT_IDS and (key is None or self.rng.random() < 0.5):
            document_id = self.rng.choice(RECENT_IDS)
        elif key is not None:
            document_id = f"{PRELOAD_PREFIX}-{key}"
        else:
            self.search()  # no id is known yet
            return
        self.client.get(f"{DOCUMENTS}/{document_id}/similar", name="similar")
