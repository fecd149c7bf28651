"""A Redis record packed and read back: its text deflated past a length (the rest of
the record stays JSON), and records written before (every text in the JSON) still read."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from app.backends.redis.records import Held, Record
from app.backends.redis.store.rows import RowData
from devkit.corpus import english_like_text


def _record(text: str | None, **overrides: object) -> Record:
    fields: dict[str, object] = {
        "seq": 41,
        "created": 1_714_521_600.25,
        "cluster": 7,
        "cluster_name": "d7",
        "metadata": {"url": "https://example.com/a", "tags": ["x", "\u00e9"]},
        "text": text,
        "short": None,
        "host": 0,
    }
    fields.update(overrides)
    return Record(**fields)  # type: ignore[arg-type]


def _seq_held(packed: bytes) -> int:
    """The seq a read's Held gives of one packed record (its text left deflated)."""
    one = np.zeros(1, dtype=np.int64)
    data = RowData(
        one, one.astype(np.uint64), np.zeros((1, 2), np.uint64), one,
        np.zeros((1, 4), np.uint32), ["d"], [packed],
    )  # fmt: skip
    return Held(data).seq(0)


TEXTS = [
    None,
    "",
    "a short headline",
    english_like_text(random.Random(1), 3000),
    "\u65b0\u534e\u793e\u5317\u4eac\u7535 " * 80,  # Chinese, 3 bytes a character
    "emoji \U0001f600 and a NUL \x00 inside, " * 20,
    "x" * 199,
    "y" * 200,
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_a_record_reads_back_as_written(text: str | None) -> None:
    record = _record(text, short="a short headline", host=12)
    packed = record.pack()
    assert Record.unpack(packed) == record
    assert _seq_held(packed) == 41


def test_a_long_text_takes_fewer_bytes_and_a_short_one_stays_in_the_json() -> None:
    text = english_like_text(random.Random(2), 3000)
    packed = _record(text).pack()
    assert len(packed) < 0.7 * len(orjson.dumps(text))
    short = _record("y" * 199).pack()
    assert orjson.loads(short)["t"] == "y" * 199


def test_a_record_written_before_deflating_still_reads() -> None:
    text = english_like_text(random.Random(3), 2000)
    before = orjson.dumps(
        {"s": 5, "c": 1.5, "k": 5, "n": "d5", "m": None, "t": text, "q": None, "h": 3}
    )
    assert Record.unpack(before) == _record(
        text, seq=5, created=1.5, cluster=5, cluster_name="d5", metadata=None, host=3
    )
    assert _seq_held(before) == 5
