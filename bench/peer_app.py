"""The peer: the near-duplicate service a competent user would write without neardup.

    .venv/bin/python -m uvicorn bench.peer_app:app --host 127.0.0.1 --port 8001

A minimal FastAPI app, one uvicorn worker, everything in memory (nothing is durable):
datasketch ``MinHashLSH(threshold=0.8, num_perm=128)`` and ``simhash.SimhashIndex(k=3)``
over the shingles neardup uses: ``app.core.text.normalize``, then character 5-grams.
MinHash: ``update_batch`` over the distinct shingles as UTF-8 (datasketch's default hash,
SHA-1), with the permutations drawn once at start-up and handed to every MinHash; the
signature kept per document is its ``hashvalues`` array. SimHash: ``Simhash(shingles)``
over the list of shingles (the library's default MD5 per feature).

Same endpoints and JSON shapes as neardup for the two workloads: insert one, insert a batch
(each document also matches the earlier ones of its batch), search by text, neighbours of a
stored document. Matches carry the estimated Jaccard similarity (the fraction of equal
MinHash values), the Hamming distance of the SimHashes and the methods that found them,
best first. Handlers are ``async def``: the indexes are not thread-safe, and for CPU-bound
work one event loop without a thread hop is the fastest a single worker gets.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import xxhash
from datasketch import MinHash, MinHashLSH
from fastapi import FastAPI, HTTPException, Response
from pydantic import BaseModel, ConfigDict, Field
from simhash import Simhash, SimhashIndex

from app.core.text import normalize

NUM_PERM = 128
THRESHOLD = 0.8
MAX_DISTANCE = 3
SHINGLE_SIZE = 5
INSERT_MATCH_LIMIT = 10
SEED = 1
SCHEME = "affine32"  # datasketch 2's default scheme
# PEER_HASH=xxhash swaps the libraries' default hashes (SHA-1 per shingle for MinHash, MD5
# per feature for Simhash, most of the peer's time) for xxHash: a stronger peer, for
# showing how much of the gap the hash functions alone explain.
FAST_HASH = os.environ.get("PEER_HASH", "default") == "xxhash"
MINHASH_HASH: Callable[[bytes], int] | None = xxhash.xxh32_intdigest if FAST_HASH else None
SIMHASH_HASH: dict[str, Callable[[bytes], int]] = (
    {"hashfunc": xxhash.xxh64_intdigest} if FAST_HASH else {}
)

Method = Literal["simhash", "minhash"]

# Drawn once: MinHash(num_perm, seed) would draw the same 2 x 128 parameters per document.
_TEMPLATE = MinHash(num_perm=NUM_PERM, seed=SEED, scheme=SCHEME, hashfunc=MINHASH_HASH)
PERMUTATIONS = _TEMPLATE.permutations
EMPTY_HASHVALUES = _TEMPLATE.hashvalues


def shingles(text: str) -> list[str]:
    """Character 5-grams of the normalised text (the whole text if it is shorter)."""
    normalized = normalize(text)
    if not normalized:
        raise HTTPException(422, "text is empty after normalisation")
    return [normalized[i : i + SHINGLE_SIZE] for i in range(max(len(normalized) - 4, 1))]


class Signature:
    __slots__ = ("minhash", "simhash")

    def __init__(self, text: str) -> None:
        grams = shingles(text)
        minhash = MinHash(
            num_perm=NUM_PERM,
            seed=SEED,
            hashvalues=EMPTY_HASHVALUES,
            permutations=PERMUTATIONS,
            scheme=SCHEME,
            hashfunc=MINHASH_HASH,
        )
        minhash.update_batch([gram.encode("utf-8") for gram in set(grams)])
        self.minhash = minhash
        self.simhash = Simhash(grams, f=64, **SIMHASH_HASH)


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentIn(Input):
    id: str | None = Field(None, min_length=1, max_length=256)
    text: str
    metadata: dict[str, Any] | None = None
    on_duplicate: Literal["insert", "skip"] = "insert"


class BatchDocument(Input):
    id: str | None = Field(None, min_length=1, max_length=256)
    text: str
    metadata: dict[str, Any] | None = None


class BatchIn(Input):
    documents: list[BatchDocument] = Field(min_length=1, max_length=1000)
    on_duplicate: Literal["insert", "skip"] = "insert"


class SearchIn(Input):
    text: str
    limit: int = Field(10, ge=1, le=1000)
    min_similarity: float | None = Field(None, ge=0.0, le=1.0)


class MatchOut(BaseModel):
    id: str
    similarity: float
    hamming_distance: int
    methods: list[Method]


class InsertOut(BaseModel):
    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: list[MatchOut]


class BatchOut(BaseModel):
    results: list[InsertOut]


class MatchesOut(BaseModel):
    matches: list[MatchOut]


class Index:
    """Both indexes, each document's signature, and the clusters (id of the first)."""

    def __init__(self) -> None:
        self.lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
        self.simhash = SimhashIndex([], f=64, k=MAX_DISTANCE)
        self.hashvalues: dict[str, npt.NDArray[np.unsignedinteger[Any]]] = {}
        self.simhashes: dict[str, int] = {}
        self.cluster: dict[str, str] = {}

    def find(self, signature: Signature, exclude: str | None = None) -> list[MatchOut]:
        found: dict[str, set[Method]] = {}
        for key in self.lsh.query(signature.minhash):
            found.setdefault(key, set()).add("minhash")
        for key in self.simhash.get_near_dups(signature.simhash):
            found.setdefault(key, set()).add("simhash")
        found.pop(exclude, None)  # type: ignore[arg-type]
        matches = []
        for key, methods in found.items():
            agree = np.count_nonzero(self.hashvalues[key] == signature.minhash.hashvalues)
            distance = (self.simhashes[key] ^ signature.simhash.value).bit_count()
            matches.append(
                MatchOut(
                    id=key,
                    similarity=round(agree / NUM_PERM, 6),
                    hamming_distance=distance,
                    methods=[m for m in ("simhash", "minhash") if m in methods],
                )
            )
        matches.sort(key=lambda m: (-m.similarity, m.hamming_distance))
        return matches

    def insert(self, document_id: str | None, text: str, skip: bool) -> InsertOut:
        document_id = document_id or uuid.uuid4().hex
        if document_id in self.cluster:
            raise HTTPException(409, f"document {document_id!r} already exists")
        signature = Signature(text)
        matches = self.find(signature)[:INSERT_MATCH_LIMIT]
        cluster = self.cluster[matches[0].id] if matches else document_id
        if matches and skip:
            return InsertOut(
                id=document_id,
                inserted=False,
                duplicate_of=cluster,
                cluster_id=cluster,
                matches=matches,
            )
        self.lsh.insert(document_id, signature.minhash, check_duplication=False)
        self.simhash.add(document_id, signature.simhash)
        self.hashvalues[document_id] = signature.minhash.hashvalues
        self.simhashes[document_id] = signature.simhash.value
        self.cluster[document_id] = cluster
        return InsertOut(
            id=document_id,
            inserted=True,
            duplicate_of=cluster if matches else None,
            cluster_id=cluster,
            matches=matches,
        )


app = FastAPI(title="peer: datasketch MinHashLSH + simhash.SimhashIndex")
index = Index()
PREFIX = "/v1/collections/default"


@app.get("/readyz")
@app.get("/healthz")
async def ready() -> dict[str, str]:
    return {"status": "ok"}


@app.post(f"{PREFIX}/documents", status_code=201)
async def insert_document(body: DocumentIn, response: Response) -> InsertOut:
    result = index.insert(body.id, body.text, body.on_duplicate == "skip")
    response.status_code = 201 if result.inserted else 200
    return result


@app.post(f"{PREFIX}/documents/batch")
async def insert_batch(body: BatchIn) -> BatchOut:
    ids = [document.id for document in body.documents if document.id is not None]
    if len(set(ids)) != len(ids):
        raise HTTPException(422, "a batch may not hold the same document id twice")
    skip = body.on_duplicate == "skip"
    return BatchOut(results=[index.insert(d.id, d.text, skip) for d in body.documents])


@app.post(f"{PREFIX}/search")
async def search(body: SearchIn) -> MatchesOut:
    matches = index.find(Signature(body.text))
    if body.min_similarity is not None:
        matches = [m for m in matches if m.similarity >= body.min_similarity]
    return MatchesOut(matches=matches[: body.limit])


@app.get(f"{PREFIX}/documents/{{document_id}}/similar")
async def similar(document_id: str, limit: int = 10) -> MatchesOut:
    if document_id not in index.hashvalues:
        raise HTTPException(404, f"no document {document_id!r}")
    signature = object.__new__(Signature)
    signature.minhash = MinHash(
        num_perm=NUM_PERM,
        seed=SEED,
        hashvalues=index.hashvalues[document_id],
        permutations=PERMUTATIONS,
        scheme=SCHEME,
    )
    signature.simhash = Simhash(index.simhashes[document_id], f=64)
    return MatchesOut(matches=index.find(signature, exclude=document_id)[:limit])


@app.get("/v1/collections/default")
async def collection() -> dict[str, Any]:
    return {"name": "default", "stats": {"documents": len(index.cluster)}}
