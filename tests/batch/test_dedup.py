"""neardup dedup, local engine: against brute force, the service, and every input format.

The reference below compares every two documents in plain Python, with the rule as the
service states it (README, "A document is a near-duplicate when..."): equal normalised
texts; SimHash fingerprints within k bits (counted with ``bin``); a whole LSH band of
signature values in common (the values compared, not their hashed keys) and at least
t x K equal values (where the settings keep texts, a pair whose estimate is within
UNCERTAIN of t is decided by the Jaccard of its shingles as Python sets); or two short
texts whose character q-gram sets (Python sets of substrings) have Jaccard at least the
n-gram threshold. Its clusters are the connected components of its pairs found by a
breadth-first search, named by their first document.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import math
import random
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.batch import local
from app.batch.command import add_parser
from app.batch.readers import Fields, InputError, Split, plan_splits, read_documents
from app.cli import main
from app.collection_config import (
    CollectionConfig,
    MinHashConfig,
    NgramConfig,
    RetentionConfig,
    ShingleConfig,
    SimHashConfig,
)
from app.core.fingerprint import fingerprint, shingle_hashes
from app.core.lsh import optimal_bands
from app.core.ngram import CJK_RANGES
from app.core.template import differing_numbers
from app.core.text import normalize
from app.core.verify import UNCERTAIN
from devkit.corpus import CHINESE_NEWS, english_like_text, mutate_words
from tests import reference
from tests.conftest import make_client

METHOD_NAMES = ("exact", "simhash", "minhash", "ngram")


# ---------------------------------------------------------------------------- corpora


def make_corpus(seed: int, stories: int = 60) -> list[dict[str, Any]]:
    """Records {"id", "title", "body"} with near-duplicates of every kind: re-issues with a
    few words changed (chains of them, so that clusters are wider than pairs), exact
    copies and copies differing only in case and spacing, short titles and their edits,
    Chinese stories, texts empty once normalised, unrelated stories."""
    rng = random.Random(seed)
    bodies: list[str] = []
    titles: list[str] = []
    for _ in range(stories):
        roll = rng.random()
        if bodies and roll < 0.35:
            base = rng.choice(bodies[-20:])
            body = mutate_words(rng, base, rng.choice([0.005, 0.01, 0.02, 0.04, 0.08, 0.15]))
        elif bodies and roll < 0.45:
            body = rng.choice(bodies)
        elif bodies and roll < 0.5:
            body = "  ".join(rng.choice(bodies).upper().split())
        elif roll < 0.6:
            story = rng.choice(CHINESE_NEWS)
            body = rng.choice(
                [story.original, story.word_changed, story.sentence_moved, story.sentence_added]
            )
        elif roll < 0.63:
            body = rng.choice(["", "   ", "\t\n"])
        else:
            body = english_like_text(rng, rng.randint(300, 2500))
        bodies.append(body)
    for _ in range(stories // 2):
        roll = rng.random()
        if titles and roll < 0.5:
            title = rng.choice(titles)
            if title.isascii():
                words = title.split()
                words[rng.randrange(len(words))] = rng.choice(["rises", "falls", "UP", "say"])
                titles.append(" ".join(words))
            else:  # a Chinese title with a character or two changed
                chars = list(title)
                for _ in range(rng.randint(1, 2)):
                    chars[rng.randrange(len(chars))] = rng.choice("涨跌升降称")
                titles.append("".join(chars))
        elif roll < 0.7:  # a Chinese title: n-grams of 2 at CJK characters by default
            story = rng.choice(CHINESE_NEWS).original
            start = rng.randrange(max(1, len(story) - 40))
            titles.append(story[start : start + rng.randint(12, 40)])
        else:
            titles.append(english_like_text(rng, rng.randint(20, 90)))
    records: list[dict[str, Any]] = []
    for number, body in enumerate(bodies):
        records.append({"id": f"s{number}", "title": None, "body": body, "n": number})
    for number, title in enumerate(titles):
        records.append({"id": f"t{number}", "title": title, "body": None, "n": number})
    rng.shuffle(records)
    return records


def text_of(record: dict[str, Any]) -> str:
    return "\n".join(str(record[f]) for f in ("title", "body") if record.get(f) is not None)


SETTINGS = {
    "defaults": CollectionConfig(),
    "char": CollectionConfig(
        shingle=ShingleConfig("char", 5),
        simhash=SimHashConfig(max_distance=6),
        minhash=MinHashConfig(num_perm=64, threshold=0.6),
        ngram=NgramConfig(max_chars=120, size=2, threshold=0.5),
    ),
    "no-minhash": CollectionConfig(minhash=MinHashConfig(enabled=False)),
    "minhash-only": CollectionConfig(
        simhash=SimHashConfig(enabled=False),
        minhash=MinHashConfig(threshold=0.5),
        ngram=NgramConfig(enabled=False),
    ),
}


# ---------------------------------------------------------------------------- reference


@dataclass(frozen=True)
class Reference:
    pairs: dict[tuple[int, int], tuple[float, tuple[str, ...]]]  # positions (a < b)
    cluster: list[int]  # position -> position of its cluster's first document


def _qgram_set(text: str, size: int, cjk_size: int | None) -> set[str]:
    """q characters at each position where they fit, q = cjk_size at a CJK character."""
    grams = set()
    for i, char in enumerate(text):
        cjk = any(low <= ord(char) <= high for low, high in CJK_RANGES)
        q = cjk_size if cjk and cjk_size is not None else size
        if i + q <= len(text):
            grams.add(text[i : i + q])
    return grams or {text}


def brute_force(
    texts: list[str], config: CollectionConfig, times: list[int] | None = None
) -> Reference:
    """Every two documents compared; with ``times`` (microseconds) and the settings'
    match_window, only those at most the window apart."""
    window = None
    if config.match_window is not None:
        assert times is not None
        number, unit = int(config.match_window[:-1]), config.match_window[-1]
        window = number * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit] * 10**6
    normalised = [normalize(text) for text in texts]
    params = config.fingerprint_params
    prints = {i: fingerprint([text], params) for i, text in enumerate(texts) if normalised[i] != ""}
    # The shingles MinHash hashed, as Python sets: near the threshold, with the texts
    # kept, their exact Jaccard decides a MinHash pair (app/core/verify.py).
    shingle_sets = {i: set(shingle_hashes(normalised[i], params).tolist()) for i in prints}
    k = config.simhash.max_distance
    num_perm, threshold = config.minhash.num_perm, config.minhash.threshold
    bands, rows = optimal_bands(threshold, num_perm)
    ngram = config.ngram
    pairs: dict[tuple[int, int], tuple[float, tuple[str, ...]]] = {}
    for a, b in itertools.combinations(sorted(prints), 2):
        if window is not None and times is not None and abs(times[a] - times[b]) > window:
            continue
        fa, fb = prints[a], prints[b]
        methods = set()
        if normalised[a] == normalised[b]:
            methods.add("exact")
        distance = bin(int(fa.simhash[0]) ^ int(fb.simhash[0])).count("1")
        if config.simhash.enabled and distance <= k:
            methods.add("simhash")
        sig_a, sig_b = fa.minhash[0].tolist(), fb.minhash[0].tolist()
        agree = sum(x == y for x, y in zip(sig_a, sig_b, strict=True))
        shared_band = any(
            sig_a[band * rows : (band + 1) * rows] == sig_b[band * rows : (band + 1) * rows]
            for band in range(bands)
        )
        shingle_jaccard = math.nan  # where the texts decided MinHash
        if config.minhash.enabled and shared_band:
            estimate = agree / num_perm
            if not config.keeps_text or estimate >= threshold + UNCERTAIN:
                if agree >= threshold * num_perm - 1e-9:
                    methods.add("minhash")
            elif agree >= (threshold - UNCERTAIN) * num_perm - 1e-9:
                sa, sb = shingle_sets[a], shingle_sets[b]
                shingle_jaccard = len(sa & sb) / len(sa | sb)
                if shingle_jaccard >= threshold:
                    methods.add("minhash")
        jaccard = math.nan
        short = max(len(normalised[a]), len(normalised[b])) <= ngram.max_chars
        if ngram.enabled and short:
            qa = _qgram_set(normalised[a], ngram.size, ngram.cjk_size)
            qb = _qgram_set(normalised[b], ngram.size, ngram.cjk_size)
            value = len(qa & qb) / len(qa | qb)
            # Two reports of one template are not matched: the rule's own predicate
            # (tested against hand-labelled families in tests/api/test_short_templates.py).
            template = ngram.same_numbers and differing_numbers(normalised[a], normalised[b])
            if value >= ngram.threshold and not template:
                methods.add("ngram")
                jaccard = value
        if not methods:
            continue
        if config.minhash.enabled:
            measured = agree / num_perm if math.isnan(shingle_jaccard) else shingle_jaccard
            similarity = measured if math.isnan(jaccard) else max(measured, jaccard)
        else:
            similarity = 1 - distance / 64 if math.isnan(jaccard) else jaccard
        pairs[(a, b)] = (round(similarity, 6), tuple(m for m in METHOD_NAMES if m in methods))
    neighbours: dict[int, list[int]] = {}
    for a, b in pairs:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    cluster = list(range(len(texts)))
    seen: set[int] = set()
    for start in range(len(texts)):
        if start in seen:
            continue
        component, queue = [start], deque([start])
        seen.add(start)
        while queue:
            for other in neighbours.get(queue.popleft(), []):
                if other not in seen:
                    seen.add(other)
                    component.append(other)
                    queue.append(other)
        for member in component:
            cluster[member] = min(component)
    return Reference(pairs, cluster)


# ---------------------------------------------------------------------------- helpers


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return path


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@dataclass(frozen=True)
class Output:
    pairs: list[dict[str, Any]]
    clusters: list[dict[str, Any]]
    kept: list[Any]
    raw: dict[str, bytes]


def read_output(out: Path) -> Output:
    names = ("pairs.jsonl", "clusters.jsonl", "kept.jsonl")
    return Output(
        read_jsonl(out / "pairs.jsonl"),
        read_jsonl(out / "clusters.jsonl"),
        read_jsonl(out / "kept.jsonl"),
        {name: (out / name).read_bytes() for name in names},
    )


def run_local(
    inputs: list[Path], out: Path, config: CollectionConfig, **options: Any
) -> tuple[Output, Any]:
    options.setdefault("fields", Fields("id", ("title", "body")))
    options.setdefault("progress", False)
    options.setdefault("workers", 1)
    summary = local.run([str(p) for p in inputs], config, local.Options(out=out, **options))
    return read_output(out), summary


def assert_matches_reference(
    output: Output, records: list[dict[str, Any]], reference: Reference
) -> None:
    position = {record["id"]: i for i, record in enumerate(records)}
    found = {
        (position[p["a"]], position[p["b"]]): (p["similarity"], tuple(p["methods"]))
        for p in output.pairs
    }
    assert len(found) == len(output.pairs), "a pair is written twice"
    missing = set(reference.pairs) - set(found)
    extra = set(found) - set(reference.pairs)
    assert not missing and not extra, f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"
    for pair, expected in reference.pairs.items():
        assert found[pair] == expected, (pair, found[pair], expected)
    keys = [(position[p["a"]], position[p["b"]]) for p in output.pairs]
    assert keys == sorted(keys), "pairs are not in input order"
    assert all(a < b for a, b in keys), "a is not the earlier document"
    ids = [record["id"] for record in records]
    assert [c["id"] for c in output.clusters] == ids
    assert [c["cluster_id"] for c in output.clusters] == [ids[c] for c in reference.cluster]
    first = [r for i, r in enumerate(records) if reference.cluster[i] == i]
    assert output.kept == first


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_local_engine_equals_brute_force(tmp_path: Path, name: str) -> None:
    config = SETTINGS[name]
    records = make_corpus(seed=len(name), stories=90)
    reference = brute_force([text_of(r) for r in records], config)
    # The corpus has what the test is about: every method, identical texts, chains.
    methods = {m for _, ms in reference.pairs.values() for m in ms}
    expected = {"exact"} | {m for m in METHOD_NAMES[1:] if getattr(config, m).enabled}
    assert methods == expected, methods
    transitive = [
        (a, b)
        for a, b in itertools.combinations(range(len(records)), 2)
        if reference.cluster[a] == reference.cluster[b] and (a, b) not in reference.pairs
    ]
    assert transitive, "no cluster wider than its pairs"
    output, summary = run_local(
        [write_jsonl(tmp_path / "in.jsonl", records)], tmp_path / "out", config
    )
    assert_matches_reference(output, records, reference)
    assert summary.documents == len(records)
    assert summary.pairs == len(reference.pairs)
    assert summary.clusters == len(output.kept)
    assert summary.empty == sum(1 for r in records if not normalize(text_of(r)))


def test_more_simhash_blocks_find_the_same_pairs(tmp_path: Path) -> None:
    config = CollectionConfig(simhash=SimHashConfig(max_distance=5))
    records = make_corpus(seed=7, stories=60)
    reference = brute_force([text_of(r) for r in records], config)
    path = write_jsonl(tmp_path / "in.jsonl", records)
    for blocks in (6, 8):
        output, _ = run_local([path], tmp_path / f"out{blocks}", config, simhash_blocks=blocks)
        assert_matches_reference(output, records, reference)


def test_workers_and_chunks_change_nothing(tmp_path: Path) -> None:
    config = CollectionConfig()
    records = make_corpus(seed=3, stories=120)
    path = write_jsonl(tmp_path / "in.jsonl", records)
    one, _ = run_local([path], tmp_path / "one", config)
    many, _ = run_local([path], tmp_path / "many", config, workers=2, chunk_size=17)
    assert many.raw == one.raw
    assert_matches_reference(one, records, brute_force([text_of(r) for r in records], config))


def test_service_and_dedup_agree(tmp_path: Path) -> None:
    """The same documents posted to the service: the pairs its /similar answers name are
    the pairs dedup writes, with the same similarity and methods; and the service's
    clusters (a document joins its best match's) never cross dedup's components."""
    records = make_corpus(seed=11, stories=120)
    settings = {"shingle": {"unit": "word", "size": 4}, "minhash": {"threshold": 0.7}}
    from app.batch.rules import parse_settings

    config = parse_settings(json.dumps(settings))
    output, _ = run_local([write_jsonl(tmp_path / "in.jsonl", records)], tmp_path / "out", config)
    dedup_pairs = {(p["a"], p["b"]): (p["similarity"], p["methods"]) for p in output.pairs}
    dedup_cluster = {c["id"]: c["cluster_id"] for c in output.clusters}
    position = {record["id"]: i for i, record in enumerate(records)}

    service_pairs: dict[tuple[str, str], tuple[float, list[str]]] = {}
    service_cluster: dict[str, str] = {}
    client_iterator = make_client(tmp_path)
    client: TestClient = next(client_iterator)
    try:
        assert client.put("/v1/collections/batch", json=settings).status_code == 201
        documents = [{"id": r["id"], "text": text_of(r)} for r in records if normalize(text_of(r))]
        for start in range(0, len(documents), 100):
            answer = client.post(
                "/v1/collections/batch/documents/batch",
                json={"documents": documents[start : start + 100]},
            )
            assert answer.status_code == 200, answer.text
            for result in answer.json()["results"]:
                service_cluster[result["id"]] = result["cluster_id"]
        for document in documents:
            answer = client.get(
                f"/v1/collections/batch/documents/{document['id']}/similar", params={"limit": 1000}
            )
            assert answer.status_code == 200, answer.text
            # The near-duplicate pairs (the service finds passages too: --passages' part).
            for match in reference.whole_document_matches(answer.json()["matches"]):
                a, b = sorted((document["id"], match["id"]), key=position.__getitem__)
                service_pairs[(a, b)] = (match["similarity"], match["methods"])
    finally:
        next(client_iterator, None)
    assert len(dedup_pairs) > 50
    assert service_pairs == dedup_pairs
    for document, cluster in service_cluster.items():
        assert dedup_cluster[document] == dedup_cluster[cluster], (document, cluster)


# ---------------------------------------------------------------------------- input


def _write_csv(path: Path, records: list[dict[str, Any]], delimiter: str) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["id", "title", "body", "n"], delimiter=delimiter
        )
        writer.writeheader()
        for record in records:
            writer.writerow({k: "" if v is None else v for k, v in record.items()})
    return path


def _write_parquet(path: Path, records: list[dict[str, Any]], row_group_size: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=row_group_size)
    return path


def test_every_format_gives_the_same_result(tmp_path: Path) -> None:
    config = CollectionConfig()
    records = make_corpus(seed=5, stories=60)
    reference = brute_force([text_of(r) for r in records], config)
    jsonl = write_jsonl(tmp_path / "in.jsonl", records)
    gz = tmp_path / "in.jsonl.gz"
    gz.write_bytes(gzip.compress(jsonl.read_bytes()))
    csv_path = _write_csv(tmp_path / "in.csv", records, ",")
    tsv_path = _write_csv(tmp_path / "in.tsv", records, "\t")
    parquet = _write_parquet(tmp_path / "in.parquet", records, row_group_size=13)
    outputs = {}
    for path in (jsonl, gz, csv_path, tsv_path, parquet):
        output, _ = run_local([path], tmp_path / f"out-{path.name}", config)
        outputs[path.name] = output
    assert_matches_reference(outputs["in.jsonl"], records, reference)
    for name, output in outputs.items():
        assert output.raw["pairs.jsonl"] == outputs["in.jsonl"].raw["pairs.jsonl"], name
        assert output.raw["clusters.jsonl"] == outputs["in.jsonl"].raw["clusters.jsonl"], name
    # kept.jsonl repeats the records: JSON lines as they were, CSV as text columns.
    assert outputs["in.jsonl.gz"].kept == outputs["in.jsonl"].kept
    assert outputs["in.parquet"].kept == outputs["in.jsonl"].kept
    as_text = [
        {k: "" if v is None else str(v) for k, v in record.items()}
        for record in outputs["in.jsonl"].kept
    ]
    assert outputs["in.csv"].kept == as_text
    assert outputs["in.tsv"].kept == as_text


def test_several_files_are_one_corpus(tmp_path: Path) -> None:
    config = CollectionConfig()
    records = make_corpus(seed=9, stories=60)
    first = write_jsonl(tmp_path / "a.jsonl", records[:40])
    second = _write_parquet(tmp_path / "b.parquet", records[40:], row_group_size=1000)
    output, _ = run_local([first, second], tmp_path / "out", config)
    assert_matches_reference(output, records, brute_force([text_of(r) for r in records], config))


def test_jsonl_splits_hold_every_line_once(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "text": "x" * (i % 37)}) for i in range(300)]
    body = ""
    for i, line in enumerate(lines):
        body += line + ("\r\n" if i % 3 == 0 else "\n") + ("\n  \n" if i % 11 == 0 else "")
    path = tmp_path / "in.jsonl"
    path.write_text(body.rstrip("\n"), "utf-8")  # no newline after the last line
    whole = list(read_documents(Split(str(path), "jsonl"), Fields()))
    assert [value for value, _ in whole] == list(range(300))
    for split_bytes in (1, 7, 64, 1000):
        splits = plan_splits([str(path)], split_bytes=split_bytes)
        assert len(splits) > 1
        parts = [d for split in splits for d in read_documents(split, Fields())]
        assert parts == whole, split_bytes


def test_ids_missing_fields_and_errors(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"text": "alpha beta gamma delta epsilon zeta eta theta"},
            {"id": 7, "text": "alpha beta gamma delta epsilon zeta eta theta"},
            {"id": "x", "head": "alpha beta gamma delta", "text": "epsilon zeta eta theta"},
            {"id": "y"},
        ],
    )
    output, summary = run_local([path], tmp_path / "out", CollectionConfig(), fields=Fields())
    assert [c["id"] for c in output.clusters] == [0, 7, "x", "y"]
    assert output.pairs == [
        {"a": 0, "b": 7, "similarity": 1.0, "methods": ["exact", "simhash", "minhash", "ngram"]}
    ]
    assert summary.empty == 1  # "y" has no text field
    assert summary.clusters == 3
    joined, _ = run_local(
        [path], tmp_path / "joined", CollectionConfig(), fields=Fields("id", ("head", "text"))
    )
    assert {(p["a"], p["b"]) for p in joined.pairs} == {(0, 7), (0, "x"), (7, "x")}

    duplicate = write_jsonl(tmp_path / "dup.jsonl", [{"id": "a", "text": "x"}] * 2)
    with pytest.raises(InputError, match="'a' is used twice"):
        run_local([duplicate], tmp_path / "dup", CollectionConfig(), fields=Fields())
    bad_id = write_jsonl(tmp_path / "bad.jsonl", [{"id": [1], "text": "x"}])
    with pytest.raises(InputError, match="an id is a string or an integer"):
        run_local([bad_id], tmp_path / "bad", CollectionConfig(), fields=Fields())
    not_json = tmp_path / "not.jsonl"
    not_json.write_text('{"id": 1, "text": "x"}\n{"id": 2,\n', "utf-8")
    with pytest.raises(InputError, match="at byte 23: not JSON"):
        run_local([not_json], tmp_path / "not", CollectionConfig(), fields=Fields())
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(InputError, match="cannot tell the format"):
        run_local([tmp_path / "in.txt"], tmp_path / "txt", CollectionConfig())


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = make_corpus(seed=13, stories=40)
    path = write_jsonl(tmp_path / "in.jsonl", records)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"name": "news", "settings": {"minhash": {"threshold": 0.7}}}))
    main(
        [
            "dedup", str(path), "--out", str(tmp_path / "out"), "--text-field", "title",
            "--text-field", "body", "--settings", f"@{settings}", "--quiet", "--workers", "2",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    config = CollectionConfig(minhash=MinHashConfig(threshold=0.7))
    reference = brute_force([text_of(r) for r in records], config)
    assert summary["documents"] == len(records)
    assert summary["pairs"] == len(reference.pairs)
    assert summary["removed"] == len(records) - len(set(reference.cluster))
    assert f"pairs      {len(reference.pairs):,}" in printed
    assert_matches_reference(read_output(tmp_path / "out"), records, reference)
    with pytest.raises(SystemExit, match="--settings"):
        main(["dedup", str(path), "--out", str(tmp_path / "x"), "--settings", '{"simhash": 3}'])
    with pytest.raises(SystemExit, match="no such file"):
        main(["dedup", str(tmp_path / "absent.jsonl"), "--out", str(tmp_path / "y")])


def test_parser_is_registered() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    arguments = parser.parse_args(["dedup", "a.jsonl", "--out", "o"])
    assert arguments.engine == "local" and arguments.inputs == ["a.jsonl"]


REUTERS_DIR = Path(__file__).resolve().parents[2].parent / "shared/data/reuters21578"


@pytest.mark.data
def test_reuters_pairs_score_as_the_replay(tmp_path: Path) -> None:
    """Reuters-21578 de-duplicated at once finds the pairs the service's replay finds
    (tests/quality/test_reuters_replay.py: F1 0.978 against the labelled pairs with word 5-gram
    Jaccard >= 0.8, every identical pair found), with the replay's methods (no n-gram
    index: the labels know nothing of short texts). With the defaults, the n-gram index
    only adds pairs of short texts."""
    stories = REUTERS_DIR / "reuters21578.jsonl"
    labels_path = REUTERS_DIR / "reuters21578.near_dup_pairs.tsv"
    if not (stories.is_file() and labels_path.is_file()):
        pytest.skip("../shared/data/reuters21578 not found: the Reuters test needs it")
    positives: set[tuple[int, int]] = set()
    identical: set[tuple[int, int]] = set()
    with labels_path.open(encoding="utf-8") as handle:
        for line in itertools.islice(handle, 1, None):
            a, b, jaccard = line.split("\t")[:3]
            pair = (min(int(a), int(b)), max(int(a), int(b)))
            if float(jaccard) >= 0.8:
                positives.add(pair)
            if float(jaccard) == 1.0:
                identical.add(pair)
    fields = Fields("id", ("title", "body"))
    config = CollectionConfig(ngram=NgramConfig(enabled=False))
    output, summary = run_local([stories], tmp_path / "replay", config, fields=fields, workers=0)
    found = {(min(p["a"], p["b"]), max(p["a"], p["b"])) for p in output.pairs}
    precision = len(found & positives) / len(found)
    recall = len(found & positives) / len(positives)
    f1 = 2 * precision * recall / (precision + recall)
    assert f1 >= 0.968, (f1, precision, recall)
    assert summary.documents == 21_578 and summary.empty == 1
    # Identical once normalised: every such labelled pair (the labels' tokens drop
    # punctuation, so a few J = 1.0 pairs differ in it and are found as near-duplicates).
    exact = {
        (min(p["a"], p["b"]), max(p["a"], p["b"])) for p in output.pairs if "exact" in p["methods"]
    }
    assert identical - found == set()
    assert exact <= identical | positives
    defaults, _ = run_local([stories], tmp_path / "defaults", CollectionConfig(), fields=fields)
    with_ngram = {(min(p["a"], p["b"]), max(p["a"], p["b"])): p for p in defaults.pairs}
    assert found <= set(with_ngram)
    for pair in set(with_ngram) - found:
        assert "ngram" in with_ngram[pair]["methods"], with_ngram[pair]


# ---------------------------------------------------------------------------- match window

WINDOW = "36h"
WINDOW_US = 36 * 3600 * 10**6
EPOCH_2024 = 1_704_067_200  # 2024-01-01T00:00:00Z in Unix seconds


def _time_value(rng: random.Random, microseconds: int) -> Any:
    """A time as a client may send it: ISO 8601 at some UTC offset (or Z), or Unix
    seconds, whole or with a fraction (an exact binary fraction, so both read alike)."""
    seconds, fraction = divmod(microseconds, 10**6)
    kind = rng.randrange(4)
    if kind == 0 and fraction in (0, 250_000, 500_000):
        return seconds + fraction / 10**6 if fraction else seconds
    hours = rng.choice([0, 2, -5, 9])
    moment = datetime.fromtimestamp(seconds, timezone(timedelta(hours=hours)))
    moment = moment.replace(microsecond=fraction)
    text = moment.isoformat()
    return text.replace("+00:00", "Z") if kind == 1 else text


def timed_corpus(seed: int) -> tuple[list[dict[str, Any]], list[int]]:
    """make_corpus's records with a "published" time each, over ten days: a window of 36
    hours keeps some identical copies and near-duplicates together and parts others;
    some pairs are exactly the window apart (kept) or one microsecond more (parted)."""
    rng = random.Random(seed)
    records = make_corpus(seed=seed, stories=120)
    times = [
        EPOCH_2024 * 10**6 + rng.choice([0, 250_000, 500_000, rng.randrange(10**6)])
        + rng.randrange(10 * 86400) * 10**6
        for _ in records
    ]  # fmt: skip
    untimed = brute_force([text_of(r) for r in records], CollectionConfig())
    edges = sorted(untimed.pairs)
    rng.shuffle(edges)
    for a, b in edges[:6]:
        times[b] = times[a] + WINDOW_US
    for a, b in edges[6:12]:
        times[b] = times[a] - WINDOW_US - 1
    for record, microseconds in zip(records, times, strict=True):
        record["published"] = _time_value(rng, microseconds)
    return records, times


def test_match_window_equals_brute_force(tmp_path: Path) -> None:
    """With a match_window, two documents pair only when their times are at most the
    window apart (as the service's inserts match), and clusters are the components of
    those pairs: identical copies far apart in time are apart."""
    config = CollectionConfig(match_window=WINDOW)
    records, times = timed_corpus(seed=17)
    texts = [text_of(r) for r in records]
    reference = brute_force(texts, config, times)
    untimed = brute_force(texts, CollectionConfig())
    # What the test is about: pairs exactly the window apart kept, pairs parted by the
    # window (identical copies among them), clusters that the window splits.
    assert any(abs(times[a] - times[b]) == WINDOW_US for a, b in reference.pairs)
    parted = set(untimed.pairs) - set(reference.pairs)
    assert any("exact" in untimed.pairs[p][1] for p in parted)
    assert any(abs(times[a] - times[b]) == WINDOW_US + 1 for a, b in parted)
    assert any("exact" in methods for _, methods in reference.pairs.values())
    assert reference.cluster != untimed.cluster
    fields = Fields("id", ("title", "body"), "published")
    path = write_jsonl(tmp_path / "in.jsonl", records)
    output, summary = run_local([path], tmp_path / "out", config, fields=fields)
    assert_matches_reference(output, records, reference)
    assert summary.pairs == len(reference.pairs)
    many, _ = run_local([path], tmp_path / "many", config, fields=fields, workers=2, chunk_size=9)
    assert many.raw == output.raw
    # CSV: every field is text, and a plain number is Unix seconds; Parquet: a timestamp
    # column with a time zone.
    csv_records = [{k: v for k, v in r.items() if k != "n"} for r in records]
    csv_path = tmp_path / "in.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "title", "body", "published"])
        writer.writeheader()
        for record in csv_records:
            writer.writerow({k: "" if v is None else v for k, v in record.items()})
    from_csv, _ = run_local([csv_path], tmp_path / "csv", config, fields=fields)
    parquet = _write_parquet(
        tmp_path / "in.parquet",
        [
            {**record, "published": datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=t)}
            for record, t in zip(records, times, strict=True)
        ],
        row_group_size=50,
    )
    from_parquet, _ = run_local([parquet], tmp_path / "parquet", config, fields=fields)
    for other in (from_csv, from_parquet):
        assert other.raw["pairs.jsonl"] == output.raw["pairs.jsonl"]
        assert other.raw["clusters.jsonl"] == output.raw["clusters.jsonl"]


def test_time_settings_a_corpus_job_cannot_apply_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        {"id": "a", "text": "alpha beta gamma delta epsilon zeta", "t": "2024-05-01T12:00:00Z"},
        {"id": "b", "text": "alpha beta gamma delta epsilon zeta", "t": 1714564800},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    timed = Fields("id", ("text",), "t")
    window = CollectionConfig(match_window="1h")
    output, _ = run_local([path], tmp_path / "ok", window, fields=timed)
    assert [(p["a"], p["b"]) for p in output.pairs] == [("a", "b")]  # 0 s apart
    with pytest.raises(InputError, match="give the field that holds them with --timestamp"):
        run_local([path], tmp_path / "x1", window, fields=Fields())
    with pytest.raises(InputError, match="--timestamp-field is used by a match_window only"):
        run_local([path], tmp_path / "x2", CollectionConfig(), fields=timed)
    for retention in (RetentionConfig(max_age="7d"), RetentionConfig(max_documents=10)):
        with pytest.raises(InputError, match="a corpus job holds none"):
            run_local([path], tmp_path / "x3", CollectionConfig(retention=retention))
    for bad, reason in (
        ({"id": "c", "text": "x"}, "no 't' field"),
        ({"id": "c", "text": "x", "t": "2024-05-01T12:00:00"}, "has no UTC offset"),
        ({"id": "c", "text": "x", "t": "1714564800"}, "not an ISO 8601 time"),
        ({"id": "c", "text": "x", "t": 1e300}, "outside the years 1 to 9999"),
    ):
        bad_path = write_jsonl(tmp_path / "bad.jsonl", [*records, bad])
        with pytest.raises(InputError, match=f"position 2 has no time this reads.*{reason}"):
            run_local([bad_path], tmp_path / "x5", window, fields=timed)
    main(
        [
            "dedup", str(path), "--out", str(tmp_path / "cli"), "--quiet",
            "--settings", '{"match_window": "1h"}', "--timestamp-field", "t",
        ]
    )  # fmt: skip
    assert "pairs      1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="neardup dedup: --settings: a retention"):
        main(
            [
                "dedup", str(path), "--out", str(tmp_path / "cli2"),
                "--settings", '{"retention": {"max_age": "30d"}}',
            ]
        )  # fmt: skip


def test_csv_and_parquet_without_pyarrow_say_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow is the batch extra's (the server's image leaves it out): without it, a
    CSV input is a clear input error that names the extra, not a traceback."""
    import sys

    from app.batch import readers

    for module in ("pyarrow", "pyarrow.csv", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, module, None)  # None: "import" raises ImportError
    with pytest.raises(readers.InputError, match=r"pip install 'neardup\[batch\]'"):
        readers.arrow("pyarrow.csv")
