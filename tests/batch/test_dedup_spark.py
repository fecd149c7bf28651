"""neardup dedup --engine spark: the same files as the local engine, on a real local Spark.

Spark needs a Java runtime (17 or later for Spark 4). When ``java`` is missing and this
runs as root on a machine with apt-get (CI), the fixture installs Debian's
default-jre-headless; elsewhere, or when that fails, the test skips and says why.
One run on a few thousand documents: a local Spark takes some 10 s to start and each
of the job's shuffles a fraction of a second.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.batch.readers import Fields, InputError
from app.collection_config import CollectionConfig, PassagesConfig
from tests.batch.test_dedup import (
    WINDOW,
    _write_parquet,
    make_corpus,
    read_output,
    run_local,
    timed_corpus,
    write_jsonl,
)

pytestmark = pytest.mark.spark
MIN_JAVA = 17
APT_TIMEOUT_SECONDS = 900


def _java_version() -> int | None:
    java = shutil.which("java")
    if java is None:
        return None
    shown = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def _install_java() -> str | None:
    """Install Debian's headless JRE; None when done, else why it could not be."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "needs root and apt-get to install one"
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "TMPDIR": "/var/tmp"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "default-jre-headless"],
    ):
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=environment,
                timeout=APT_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} took more than {APT_TIMEOUT_SECONDS} s"
        if done.returncode != 0:
            return f"{' '.join(command)} failed: {done.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def java() -> None:
    version = _java_version()
    if version is None:
        problem = _install_java()
        version = _java_version()
        if version is None:
            pytest.skip(f"Spark needs Java {MIN_JAVA}+ and none could be installed: {problem}")
    if version < MIN_JAVA:
        pytest.skip(f"Spark 4 needs Java {MIN_JAVA} or later; this machine has Java {version}")


@pytest.fixture(scope="module")
def spark_session(java: None) -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is in the test extra: pip install -e '.[test]'")
    from app.batch import spark

    session = spark.session(spark.SparkOptions(out=Path("."), master="local[2]", progress=False))
    try:
        yield session
    finally:
        session.stop()


def test_spark_engine_writes_what_the_local_engine_writes(
    tmp_path: Path, spark_session: object
) -> None:
    from app.batch import spark

    records = make_corpus(seed=21, stories=2000)
    # Two files, two formats: JSON lines cut into several splits, Parquet in row groups.
    first = write_jsonl(tmp_path / "a.jsonl", records[:1800])
    second = _write_parquet(tmp_path / "b.parquet", records[1800:], row_group_size=400)
    config = CollectionConfig()
    fields = Fields("id", ("title", "body"))
    local_output, local_summary = run_local([first, second], tmp_path / "local", config)
    summary = spark.run(
        [str(first), str(second)],
        config,
        spark.SparkOptions(
            out=tmp_path / "spark", fields=fields, progress=False, split_bytes=256 << 10
        ),
        spark_session,  # type: ignore[arg-type]
    )
    spark_output = read_output(tmp_path / "spark")
    for name, content in local_output.raw.items():
        assert spark_output.raw[name] == content, name
    assert (summary.documents, summary.pairs, summary.clusters, summary.empty) == (
        local_summary.documents,
        local_summary.pairs,
        local_summary.clusters,
        local_summary.empty,
    )
    # The local engine is checked against brute force in tests/batch/test_dedup.py; this corpus
    # has pairs of every method and clusters wider than a pair, as that one's have.
    assert local_summary.pairs > 1000 and local_summary.clusters < len(records)
    methods = {m for line in local_output.pairs for m in line["methods"]}
    assert methods == {"exact", "simhash", "minhash", "ngram"}
    # Pairs whose texts decided MinHash (an exact Jaccard, not a count of 128 values):
    # the Spark engine's join with the texts was exercised.
    assert any(
        "ngram" not in line["methods"] and (line["similarity"] * 128) % 1 > 1e-3
        for line in local_output.pairs
    )
    # An input error raised on an executor reaches the caller as the local engine's.
    duplicate = write_jsonl(tmp_path / "dup.jsonl", [{"id": "a", "text": "x"}] * 2)
    with pytest.raises(InputError, match="'a' is used twice"):
        spark.run(
            [str(duplicate)],
            config,
            spark.SparkOptions(out=tmp_path / "dup", progress=False),
            spark_session,  # type: ignore[arg-type]
        )
    bad_id = write_jsonl(tmp_path / "bad.jsonl", [{"id": [1], "text": "x"}])
    with pytest.raises(InputError, match="an id is a string or an integer"):
        spark.run(
            [str(bad_id)],
            config,
            spark.SparkOptions(out=tmp_path / "bad", progress=False),
            spark_session,  # type: ignore[arg-type]
        )


def test_spark_engine_applies_a_match_window_as_the_local_engine(
    tmp_path: Path, spark_session: object
) -> None:
    """With a match_window, the Spark engine keeps the pairs within it and clusters their
    components, as the local engine does (checked against brute force in test_dedup.py)."""
    from app.batch import spark

    records, _ = timed_corpus(seed=23)
    first = write_jsonl(tmp_path / "a.jsonl", records[:100])
    second = write_jsonl(tmp_path / "b.jsonl", records[100:])
    config = CollectionConfig(match_window=WINDOW)
    fields = Fields("id", ("title", "body"), "published")
    local_output, local_summary = run_local(
        [first, second], tmp_path / "local", config, fields=fields
    )
    untimed, _ = run_local(
        [first, second],
        tmp_path / "untimed",
        CollectionConfig(),
        fields=Fields("id", ("title", "body")),
    )
    assert untimed.raw["pairs.jsonl"] != local_output.raw["pairs.jsonl"]
    assert untimed.raw["clusters.jsonl"] != local_output.raw["clusters.jsonl"]
    summary = spark.run(
        [str(first), str(second)],
        config,
        spark.SparkOptions(
            out=tmp_path / "spark", fields=fields, progress=False, split_bytes=8 << 10
        ),
        spark_session,  # type: ignore[arg-type]
    )
    spark_output = read_output(tmp_path / "spark")
    for name, content in local_output.raw.items():
        assert spark_output.raw[name] == content, name
    assert (summary.pairs, summary.clusters) == (local_summary.pairs, local_summary.clusters)


@pytest.mark.parametrize("html", [False, True])
def test_spark_engine_finds_the_passages_the_local_engine_finds(
    tmp_path: Path, spark_session: object, html: bool
) -> None:
    """--passages and --drop-contained on Spark write the local engine's passages.jsonl
    and kept.jsonl (the local engine's passages are checked against a brute-force DP in
    test_dedup_passages.py); a footer more documents share than max_rows pairs nothing."""
    from app.batch import spark
    from tests.batch.test_dedup_passages import _corpus

    records = _corpus()
    footer = " ".join(f"footer{i}" for i in range(30))
    for record in records[-5:]:  # five documents share a footer; max_rows is 3
        record["text"] += "\n" + footer
    if html:  # the passages of pages are found in their main content
        for record in records:
            record["text"] = (
                "<html><body><nav>home news sport</nav><article><p>"
                + record["text"]
                + "</p></article></body></html>"
            )
    first = write_jsonl(tmp_path / "a.jsonl", records[:9])
    second = write_jsonl(tmp_path / "b.jsonl", records[9:])
    config = CollectionConfig(passages=PassagesConfig(min_tokens=10, max_rows=3))
    fields = Fields("id", ("text",))
    options: dict[str, Any] = {"fields": fields, "html": html, "drop_contained": True}
    _, local_summary = run_local(
        [first, second], tmp_path / "local", config, passages=True, **options
    )
    summary = spark.run(
        [str(first), str(second)],
        config,
        spark.SparkOptions(
            out=tmp_path / "spark", progress=False, split_bytes=4 << 10, passages=True, **options
        ),
        spark_session,  # type: ignore[arg-type]
    )
    for name in ("pairs.jsonl", "clusters.jsonl", "kept.jsonl", "passages.jsonl"):
        local_bytes = (tmp_path / "local" / name).read_bytes()
        assert (tmp_path / "spark" / name).read_bytes() == local_bytes, name
    passages = (tmp_path / "local" / "passages.jsonl").read_text().splitlines()
    found = {(line["a"], line["b"]) for line in map(json.loads, passages)}
    assert {("s0", "r1"), ("s5", "r2"), ("zh", "zh-digest")} <= found
    assert not any(a.startswith("u") and b.startswith("u") for a, b in found)  # the footer
    assert local_summary.contained > 0
    assert (summary.passage_pairs, summary.contained, summary.clusters) == (
        local_summary.passage_pairs,
        local_summary.contained,
        local_summary.clusters,
    )


def test_spark_engine_leaves_a_sites_chrome_out_as_the_local_engine(
    tmp_path: Path, spark_session: object
) -> None:
    """Pages of one host sharing only its chrome are no pair on Spark either
    (tests/batch/test_dedup_host_chrome.py), and passages.jsonl is the local engine's."""
    from app.batch import spark
    from tests.batch.test_dedup_host_chrome import check_site_pairs, site_corpus

    corpus = write_jsonl(tmp_path / "in.jsonl", site_corpus())
    fields = Fields("id", ("text",))
    run_local([corpus], tmp_path / "local", CollectionConfig(), passages=True, fields=fields)
    spark.run(
        [str(corpus)],
        CollectionConfig(),
        spark.SparkOptions(out=tmp_path / "spark", progress=False, passages=True, fields=fields),
        spark_session,  # type: ignore[arg-type]
    )
    local_bytes = (tmp_path / "local" / "passages.jsonl").read_bytes()
    assert (tmp_path / "spark" / "passages.jsonl").read_bytes() == local_bytes
    check_site_pairs(tmp_path / "spark" / "passages.jsonl")
