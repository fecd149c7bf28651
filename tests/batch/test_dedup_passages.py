"""``neardup dedup --passages`` and ``--drop-contained``: passages.jsonl holds exactly the
pairs of documents whose texts share a run of at least min_tokens equal words, with the
runs a brute-force DP over every pair finds (tests/core's reference), and the same
passages the service reports for the same texts."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from app.batch import local
from app.cli import main
from app.collection_config import CollectionConfig, PassagesConfig
from devkit.corpus import english_like_text
from tests.conftest import make_client
from tests.core.test_passages import maximal_runs, reference_tokens

MINIMUM = 10


def _corpus() -> list[dict[str, Any]]:
    """Stories, roundups of some of them (one in Chinese), a quote, unrelated texts."""
    rng = random.Random(11)
    stories = [english_like_text(random.Random(500 + i), 900) for i in range(8)]
    chinese = "新华社北京电国务院总理今天在人民大会堂会见了来访的外国代表团双方就经济合作交换意见"
    records = [{"id": f"s{i}", "text": story} for i, story in enumerate(stories)]
    records.append({"id": "zh", "text": chinese})
    records.append({"id": "r1", "text": "ROUNDUP\n\n" + "\n\n".join(stories[:3])})
    records.append({"id": "r2", "text": stories[5] + "\n---\n" + stories[6]})
    quote = " ".join(stories[7].split()[10:30])
    records.append({"id": "quote", "text": english_like_text(rng, 400) + f' "{quote}"'})
    records.append({"id": "zh-digest", "text": "摘要：" + chinese[2:30] + "。"})
    records += [{"id": f"u{i}", "text": english_like_text(rng, 700)} for i in range(5)]
    return records


def _tokens(text: str) -> list[str]:
    return [token for _, _, token in reference_tokens(text)]


def test_passages_jsonl_is_every_pair_the_reference_finds(tmp_path: Path) -> None:
    records = _corpus()
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    config = CollectionConfig(passages=PassagesConfig(min_tokens=MINIMUM))
    out = tmp_path / "out"
    summary = local.run(
        [str(corpus)], config, local.Options(out=out, passages=True, progress=False)
    )
    lines = [json.loads(line) for line in (out / "passages.jsonl").read_text().splitlines()]
    expected: dict[tuple[str, str], set[tuple[int, int, int, int]]] = {}
    for i, first in enumerate(records):
        for second in records[i + 1 :]:
            runs = maximal_runs(_tokens(first["text"]), _tokens(second["text"]), MINIMUM)
            if runs:
                spans_a, spans_b = reference_tokens(first["text"]), reference_tokens(second["text"])
                expected[(first["id"], second["id"])] = {
                    (spans_a[a][0], spans_a[b - 1][1], spans_b[c][0], spans_b[d - 1][1])
                    for a, b, c, d in runs
                }
    found = {
        (line["a"], line["b"]): {
            (p["a_start"], p["a_end"], p["b_start"], p["b_end"]) for p in line["passages"]
        }
        for line in lines
    }
    assert found == expected
    assert {("s0", "r1"), ("s5", "r2"), ("s7", "quote"), ("zh", "zh-digest")} <= set(found)
    assert summary.passage_pairs == len(expected)
    # The same texts in a service collection: the same passages.
    with_ids = {r["id"]: r["text"] for r in records}
    for client in make_client(tmp_path / "service"):
        settings = {"passages": {"enabled": True, "min_tokens": MINIMUM}}
        assert client.put("/v1/collections/c", json=settings).status_code == 201
        for line in lines:
            client.put(
                f"/v1/collections/c/documents/{line['b']}", json={"text": with_ids[line["b"]]}
            )
            answer = client.post(
                "/v1/collections/c/search",
                json={"text": with_ids[line["a"]], "limit": 50, "min_coverage": 0},
            ).json()
            [match] = [m for m in answer["matches"] if m["id"] == line["b"]]
            assert match["query_coverage"] == line["a_coverage"]
            assert match["match_coverage"] == line["b_coverage"]
            assert {
                (p["start"], p["end"], p["match_start"], p["match_end"]) for p in match["passages"]
            } == found[(line["a"], line["b"])]


def test_drop_contained_keeps_the_roundups_not_their_stories(tmp_path: Path) -> None:
    records = _corpus()
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    settings = json.dumps({"passages": {"min_tokens": MINIMUM}})
    out = tmp_path / "out"
    main(
        [
            "dedup",
            str(corpus),
            "--out",
            str(out),
            "--drop-contained",
            "--quiet",
            "--settings",
            settings,
        ]
    )
    kept = [json.loads(line)["id"] for line in (out / "kept.jsonl").read_text().splitlines()]
    # s0-s2 are inside r1, s5 and s6 inside r2, zh-digest inside zh; the quote is not
    # 80% of either text.
    assert kept == [
        "s3", "s4", "s7", "zh", "r1", "r2", "quote", "u0", "u1", "u2", "u3", "u4",
    ]  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["contained"] == 6 and summary["removed"] == 6
