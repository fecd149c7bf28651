"""Single inserts made together are inserted as one batch (app/service/coalesce.py) and
answered exactly as the same documents inserted one by one, in the same order."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from app.backends.embedded.collection import Collection
from app.backends.embedded.registry import Registry
from app.service import InsertOptions, InsertResult, NewDocument, OnDuplicate, Refused
from app.service.coalesce import SingleInserts
from app.storage import MemoryStore
from devkit.corpus import english_like_text, mutate_words


def _collection() -> Collection:
    registry = Registry(MemoryStore(), 4)
    registry.open()
    return registry.get("default")


def _stream(seed: int) -> list[tuple[NewDocument, str]]:
    """(document, on_duplicate): new texts, near and exact duplicates of earlier ones,
    retries (same id and text), conflicts (same id, other text), empty texts, short
    texts for the n-gram index, skips."""
    rng = random.Random(seed)
    sent: list[NewDocument] = []
    stream: list[tuple[NewDocument, OnDuplicate]] = []
    for number in range(120):
        roll = rng.random()
        if sent and roll < 0.2:
            text = mutate_words(rng, rng.choice(sent).text, 0.05)
        elif sent and roll < 0.3:
            text = rng.choice(sent).text
        elif roll < 0.35:
            text = "!!! ... ???"  # empty once normalised
        elif roll < 0.45:
            text = english_like_text(rng, rng.randint(30, 80))
        else:
            text = english_like_text(rng, rng.randint(300, 1500))
        document = NewDocument(text, f"d{number}", {"n": number}, 1_700_000_000 + number)
        if sent and rng.random() < 0.08:
            earlier = rng.choice(sent)
            document = earlier if rng.random() < 0.5 else NewDocument(text, earlier.id, None, None)
        stream.append((document, "skip" if rng.random() < 0.1 else "insert"))
        sent.append(document)
    return stream


def _answer(result: InsertResult | Refused) -> Any:
    if isinstance(result, Refused):
        return ("refused", result.id, result.error.code)
    return (result.id, result.inserted, result.duplicate_of, result.cluster_id, result.matches)


@pytest.mark.parametrize(("seed", "serial"), [(1, False), (2, False), (3, False), (4, True)])
def test_inserts_made_together_answer_as_one_by_one(seed: int, serial: bool) -> None:
    stream = _stream(seed)
    reference = _collection()
    expected = [
        _answer(reference.insert([document], InsertOptions(on_duplicate))[0])
        for document, on_duplicate in stream
    ]
    together = _collection()
    if serial:  # as the Redis backend gathers
        together._writes.single_inserts = SingleInserts(
            together._writes._insert_many_async, serial=True
        )

    async def send_all() -> list[Any]:
        # Requests arrive in bursts of 1-20, all of a burst in one turn of the loop.
        rng, answers, position = random.Random(seed), [], 0
        while position < len(stream):
            burst = stream[position : position + rng.randint(1, 20)]
            position += len(burst)
            answers += await asyncio.gather(
                *(together.insert_async(d, InsertOptions(o)) for d, o in burst)
            )
        return [_answer(answer) for answer in answers]

    assert asyncio.run(send_all()) == expected
    assert together._writes.single_inserts.batches < len(stream) // 2  # they were gathered
    together._check()
    for document, _ in stream:
        if document.id is not None and reference._rows.row_of.get(document.id) is not None:
            got, want = together.get(document.id), reference.get(document.id)
            assert (got.cluster_id, got.metadata, got.text) == (
                want.cluster_id,
                want.metadata,
                want.text,
            )


def test_a_failed_batch_fails_each_of_its_requests() -> None:
    collection = _collection()
    failure = RuntimeError("the disk is on fire")

    async def broken(documents: list[NewDocument], options: Any) -> list[Any]:
        raise failure

    collection._writes.single_inserts._insert_many = broken

    async def send() -> list[Any]:
        return await asyncio.gather(
            *(collection.insert_async(NewDocument(f"text number {n}", f"x{n}")) for n in range(5)),
            return_exceptions=True,
        )

    assert asyncio.run(send()) == [failure] * 5
    assert collection._writes.single_inserts.batches == 1


def test_serial_gathers_what_arrives_while_a_batch_is_in_flight() -> None:
    """One batch at a time: the documents sent while the first is being inserted, over
    several turns of the loop, go in together as the second, in arrival order, and each
    request gets its own document's answer."""
    batches: list[list[str | None]] = []
    release = asyncio.Event()

    async def insert_many(documents: list[NewDocument], options: Any) -> list[Any]:
        batches.append([d.id for d in documents])
        if len(batches) == 1:
            await release.wait()  # the first batch is in flight until released
        return [f"answer {d.id}" for d in documents]

    inserts = SingleInserts(insert_many, serial=True)
    options = InsertOptions()

    async def send() -> list[Any]:
        first = asyncio.ensure_future(inserts.insert(NewDocument("t", "a"), options))
        while not batches:  # until the first batch is in flight
            await asyncio.sleep(0)
        later = []
        for name in "bcde":  # one a turn
            later.append(asyncio.ensure_future(inserts.insert(NewDocument("t", name), options)))
            await asyncio.sleep(0)
        assert batches == [["a"]]  # nothing else started meanwhile
        release.set()
        return await asyncio.gather(first, *later)

    answers = asyncio.run(send())
    assert answers == [f"answer {name}" for name in "abcde"]
    assert batches == [["a"], ["b", "c", "d", "e"]]
    assert inserts.batches == 2
