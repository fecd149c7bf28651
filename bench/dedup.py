"""neardup dedup on a whole corpus: documents/s, peak memory and F1, beside datasketch.

Run from the repository root::

    .venv/bin/python -m bench.dedup [--runs 3] [--synthetic 1000000] [--no-spark]
    .venv/bin/python -m bench.dedup --setup /tmp/neardup-peers
    .venv/bin/python -m bench.dedup --peers /tmp/neardup-peers [--runs 3] \\
        [--synthetic 100000] [--no-reuters]

Contenders, each in a process of its own, timed from its start to its exit (reading the
input and writing the output included), its peak memory the largest sum of the resident
memory of its process tree and its CPU time the sum over that tree (both sampled from
/proc every 0.1 s: worker processes and Spark's JVM count):

- ``neardup dedup`` local engine, every core (2 here) and one worker;
- ``neardup dedup --engine spark`` at ``local[1]`` and ``local[2]``;
- datasketch's ``MinHashLSH`` (threshold 0.8, 128 permutations) on the same shingles
  (the core's word 5-gram hashes of the normalised text): every document inserted, then
  every document queried; its candidate pairs as returned.

On Reuters-21578 (../shared/data/reuters21578; skipped when absent) the pairs are scored
against the labelled pairs with word 5-gram Jaccard >= 0.8, as in bench/reuters_replay.py;
neardup runs with the service's defaults less the n-gram index (the labels know nothing of
short texts; the defaults' row shows what it adds). A synthetic corpus of ``--synthetic``
documents of about 3 KB (sentences drawn from a shared pool, 10% re-issues with a
sentence or a few words changed) measures the scale. Figures are medians of ``--runs``.
Results: bench/results/dedup.md; docs/dedup.md quotes them.

``--peers VENV``: neardup dedup beside text-dedup and datatrove, documents/s, peak memory
and F1. The peers need a virtualenv of their own; ``--setup VENV`` makes one with PEERS
below, which pulls no torch or TensorFlow.

Contenders, each a process of its own timed and sampled by ``timed`` as above
(wall time from start to exit, input read and output written; peak resident memory and
CPU time of the whole process tree), in rounds: one run of each per round, so that every
round gives same-run ratios (neardup's documents/s over each peer's), and the table
shows medians over rounds.

- ``neardup dedup`` (local engine, default workers), the service's settings less the
  n-gram index (as above: the labels know nothing of short texts), on the
  corpus as it is.
- text-dedup 0.4.0, its MinHash pipeline (``python -m text_dedup.minhash``: a Hugging
  Face ``datasets`` load of the JSON lines, signatures in ``num_proc`` processes, band
  tables in dicts, union-find, the kept records saved), 128 permutations, threshold 0.8
  (its own choice of bands: datasketch's optimum, 9 bands of 13), word 5-grams,
  ``--min_length 0`` (its default drops texts under 5 words), xxh3 hashes (its help:
  faster than its default sha1), ``num_proc`` = the cores.
- datatrove 0.10.1's MinHash de-duplication, its four stages (signatures, buckets,
  clusters, filter and write) on a LocalPipelineExecutor with a worker per core, 9
  buckets of 13 hashes (the same bands as text-dedup's: threshold 0.8 at 128 values),
  word 5-grams, 64-bit hashes.

The same shingles: both peers read a *token corpus* written before the runs (not timed):
each text normalised by neardup (app/core/text.py) and cut into neardup's word tokens,
joined by single spaces. text-dedup's split on ``\\W`` and datatrove's tokenizer (given
here a split on spaces, with its text normalisation off) then see exactly neardup's tokens,
so every tool hashes the same word 5-grams; the token corpus is checked against neardup's
own shingle hashes. The peers so skip normalisation, which neardup pays in its time.

Neither peer verifies a candidate: two documents sharing a band are one cluster, and
neither writes pairs, only clusters (and the kept records). So all are scored on
**cluster pairs**: every two documents of one cluster count as found, against the
Reuters-21578 labelled pairs with word 5-gram Jaccard >= 0.8; neardup's own pairs
(pairs.jsonl) are scored too, as above. Results:
bench/results/dedup-peers.md (or dedup-peers-synthetic-N.md); docs/dedup.md quotes them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Only the standard library and devkit.harness at the top: the peers' virtualenv runs this
# module too (--datatrove-job), from the repository root, without the project installed.
from devkit.harness import (
    REPO_ROOT,
    RESULTS_DIR,
    cpu_model_name,
    format_ratio,
    markdown_table,
    write_result,
)

REUTERS = REPO_ROOT.parent / "shared/data/reuters21578"
RESULTS = RESULTS_DIR / "dedup.md"
NEARDUP = [sys.executable, "-m", "app.cli"]
NO_NGRAM = '{"ngram": {"enabled": false}}'


def tree_sample(root: int, cpu: dict[int, float]) -> int:
    """Resident bytes of a process and all its descendants, from /proc; records the CPU
    seconds (user + system) each of them has used so far in ``cpu``."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    used: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        cpu[pid] = max(cpu.get(pid, 0.0), used.get(pid, 0.0))
        stack += children.get(pid, [])
    return total


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_bytes: int
    cpu_seconds: float  # user + system of the process tree (sampled, see tree_sample)


def timed(command: list[str]) -> Run:
    """Run a command to its end; its wall time and peak memory (process tree)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO_ROOT
    )
    peak = 0
    stop = threading.Event()
    cpu: dict[int, float] = {}

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.1):
            peak = max(peak, tree_sample(process.pid, cpu))

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, errors = process.communicate()
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{errors.decode()[-2000:]}")
    return Run(seconds, peak, sum(cpu.values()))


def read_pairs(path: Path) -> set[tuple[str, str]]:
    pairs = set()
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            pair = json.loads(line)
            a, b = str(pair["a"]), str(pair["b"])
            pairs.add((min(a, b), max(a, b)))
    return pairs


def reuters_labels() -> set[tuple[str, str]]:
    positives = set()
    with (REUTERS / "reuters21578.near_dup_pairs.tsv").open(encoding="utf-8") as handle:
        for record in csv.DictReader(handle, delimiter="\t"):
            if float(record["jaccard"]) >= 0.8:
                a, b = record["id_a"], record["id_b"]
                positives.add((min(a, b), max(a, b)))
    return positives


def f1(found: set[tuple[str, str]], positives: set[tuple[str, str]]) -> tuple[float, float, float]:
    hits = len(found & positives)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(positives)
    total = precision + recall
    return precision, recall, (2 * precision * recall / total if total else 0.0)


# ---------------------------------------------------------------------------- datasketch


def datasketch_job(path: str, out: str, text_fields: list[str]) -> None:
    """(run in its own process) MinHashLSH over the corpus: insert all, query all."""
    import numpy as np
    import orjson
    from datasketch import MinHash, MinHashLSH

    from app.collection_config import CollectionConfig
    from app.core.fingerprint import shingle_hashes
    from app.core.text import normalize

    params = CollectionConfig().fingerprint_params
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    ids: list[str] = []
    signatures = []
    with open(path, "rb") as handle:
        for line in handle:
            record = orjson.loads(line)
            text = normalize(
                "\n".join(str(record[f]) for f in text_fields if record.get(f) is not None)
            )
            if not text:
                continue
            raw = np.unique(shingle_hashes(text, params)).astype("<u8").tobytes()
            minhash = MinHash(num_perm=128)
            minhash.update_batch([raw[i : i + 8] for i in range(0, len(raw), 8)])
            key = str(record.get("id", len(ids)))
            lsh.insert(key, minhash)
            ids.append(key)
            signatures.append(minhash)
    with open(out, "w", encoding="utf-8") as handle:
        for key, minhash in zip(ids, signatures, strict=True):
            for other in lsh.query(minhash):
                if other != key:
                    handle.write(json.dumps({"a": key, "b": other}) + "\n")


# ---------------------------------------------------------------------------- synthetic


def write_synthetic(path: Path, documents: int, seed: int = 0) -> None:
    """About 3 KB a document: 25 sentences from a pool of 200,000; every tenth document
    re-issues a recent one with one sentence replaced or three words changed."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10)))
        for _ in range(50_000)
    ]
    pool = [
        " ".join(rng.choices(words, k=rng.randint(12, 22))).capitalize() + "."
        for _ in range(200_000)
    ]
    recent: list[list[str]] = []
    with path.open("w", encoding="utf-8") as handle:
        for number in range(documents):
            if recent and rng.random() < 0.1:
                sentences = list(rng.choice(recent))
                if rng.random() < 0.5:
                    sentences[rng.randrange(len(sentences))] = rng.choice(pool)
                else:
                    at = rng.randrange(len(sentences))
                    parts = sentences[at].split()
                    for _ in range(3):
                        parts[rng.randrange(len(parts))] = rng.choice(words)
                    sentences[at] = " ".join(parts)
            else:
                sentences = rng.choices(pool, k=25)
            recent.append(sentences)
            if len(recent) > 1000:
                recent.pop(0)
            handle.write(json.dumps({"id": number, "text": " ".join(sentences)}) + "\n")


# ---------------------------------------------------------------------------- main


@dataclass
class Row:
    name: str
    documents: int
    runs: list[Run]
    pairs: int
    score: tuple[float, float, float] | None = None

    def cells(self) -> list[str]:
        seconds = statistics.median(r.seconds for r in self.runs)
        peak = statistics.median(r.peak_bytes for r in self.runs)
        cpu = statistics.median(r.cpu_seconds for r in self.runs)
        cells = [
            self.name,
            f"{seconds:,.1f}",
            f"{self.documents / seconds:,.0f}",
            f"{cpu / self.documents * 1e6:,.0f}",
            f"{peak / 2**20:,.0f}",
            f"{self.pairs:,}",
        ]
        if self.score is not None:
            cells += [f"{value:.3f}" for value in self.score]
        return cells


def neardup_command(inputs: list[str], out: Path, extra: list[str], fields: list[str]) -> list[str]:
    command = [*NEARDUP, "dedup", *inputs, "--out", str(out), "--quiet", *extra]
    for text_field in fields:
        command += ["--text-field", text_field]
    return command


def bench_corpus(
    name: str,
    path: Path,
    documents: int,
    fields: list[str],
    runs: int,
    spark: bool,
    datasketch: bool,
    positives: set[tuple[str, str]] | None,
    scratch: Path,
) -> list[Row]:
    contenders: list[tuple[str, list[str], int]] = [
        ("neardup dedup, local, 2 workers", ["--settings", NO_NGRAM, "--workers", "2"], runs),
        ("neardup dedup, local, 1 worker", ["--settings", NO_NGRAM, "--workers", "1"], runs),
    ]
    if positives is not None:
        contenders.append(
            ("neardup dedup, local, 1 worker, defaults (n-grams on)", ["--workers", "1"], runs)
        )
    if spark:
        for master in ("local[1]", "local[2]"):
            contenders.append(
                (
                    f"neardup dedup, spark {master}",
                    ["--settings", NO_NGRAM, "--engine", "spark", "--master", master],
                    max(1, runs - 1),
                )
            )
    rows = []
    for label, extra, count in contenders:
        out = scratch / "out"
        measured = []
        for _ in range(count):
            measured.append(timed(neardup_command([str(path)], out, extra, fields)))
            print(f"{name}: {label}: {measured[-1]}", file=sys.stderr, flush=True)
        pairs = read_pairs(out / "pairs.jsonl")
        score = f1(pairs, positives) if positives is not None else None
        rows.append(Row(label, documents, measured, len(pairs), score))
    if datasketch:
        out_file = scratch / "datasketch.jsonl"
        command = [
            sys.executable,
            "-m",
            "bench.dedup",
            "--datasketch-job",
            str(path),
            str(out_file),
        ]
        command += fields
        measured = []
        for _ in range(max(1, runs - 1)):
            measured.append(timed(command))
            print(f"{name}: datasketch: {measured[-1]}", file=sys.stderr, flush=True)
        pairs = read_pairs(out_file)
        score = f1(pairs, positives) if positives is not None else None
        rows.append(
            Row("datasketch MinHashLSH(0.8), build + query", documents, measured, len(pairs), score)
        )
    return rows


def table(rows: list[Row], scored: bool) -> str:
    header = ["", "seconds", "documents/s", "CPU µs/document", "peak MB", "pairs"]
    if scored:
        header += ["precision", "recall", "F1"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- --peers

# What --setup installs. text-dedup goes in without its dependencies: it requires unisim
# (TensorFlow or ONNX, for its embedding de-duplication), pyspark and sphinx for modules
# the MinHash pipeline does not import; these are what that pipeline and datatrove's
# MinHash stages import.
PEERS_NO_DEPS = ["text-dedup==0.4.0"]
PEERS = [
    "datatrove==0.10.1",
    "datasets==5.2.0",
    "tokenizers==0.23.3",  # imported by datatrove.pipeline.dedup
    "click==8.5.1",
    "click-option-group==0.5.9",
    "scipy==1.17.1",
    "xxhash==3.8.2",  # datatrove hashes str, which xxhash 4 refuses (its extra: xxhash<4)
    "regex==2026.11.15",
    "rich==13.9.4",
    "ftfy==6.3.1",
    "orjson==3.13.0",
    "psutil==7.2.2",
]
# Bands of both peers: datasketch's optimum for threshold 0.8 at 128 values (text-dedup
# computes the same from its threshold).
BANDS, ROWS = 9, 13
TOKEN = re.compile(r"[^\W_]+")
# The Hugging Face libraries reach for the hub unless told not to; nothing here needs it.
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def setup(venv: Path) -> None:
    """A virtualenv with the peers, apart from the project's."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", *PEERS_NO_DEPS], check=True)
    subprocess.run([*pip, *PEERS], check=True)


# ---------------------------------------------------------------------------- token corpus


def write_token_corpus(
    source: Path, fields: list[str], whole: Path, parts: list[Path]
) -> tuple[int, int]:
    """The corpus as neardup's normalised word tokens, one space apart: in one file
    (``whole``) and in ``parts`` files of consecutive documents; texts with no token are
    left out (neardup pairs an empty text with nothing). Returns (documents written,
    documents whose shingles differ from neardup's own: 0 when every tool hashes the same
    shingles)."""
    import numpy as np
    import orjson

    from app.collection_config import CollectionConfig
    from app.core.fingerprint import shingle_hashes
    from app.core.text import normalize

    params = CollectionConfig().fingerprint_params
    records: list[bytes] = []
    differ = 0
    with source.open("rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            record = orjson.loads(line)
            text = normalize("\n".join(str(record[f]) for f in fields if record.get(f) is not None))
            tokens = " ".join(TOKEN.findall(text))
            if not tokens:
                continue
            ours = np.unique(shingle_hashes(text, params))
            if not np.array_equal(ours, np.unique(shingle_hashes(tokens, params))):
                differ += 1
            records.append(orjson.dumps({"id": record["id"], "text": tokens}) + b"\n")
    whole.write_bytes(b"".join(records))
    size = -(-len(records) // len(parts))
    for number, path in enumerate(parts):
        path.write_bytes(b"".join(records[number * size : (number + 1) * size]))
    return len(records), differ


# ---------------------------------------------------------------------------- the peers


def text_dedup_command(python: str, tokens: Path, work: Path) -> list[str]:
    return [
        python, "-m", "text_dedup.minhash",
        "--path", "json", "--data_files", str(tokens), "--split", "train",
        "--cache_dir", str(work / "cache"), "--output", str(work / "output"),
        "--column", "text", "--idx_column", "id",
        "--num_perm", "128", "--threshold", "0.8", "--ngram", "5", "--min_length", "0",
        "--hash_func", "xxh3", "--num_proc", str(os.cpu_count() or 1), "--debug",
    ]  # fmt: skip


def text_dedup_clusters(python: str, work: Path) -> list[list[str]]:
    """Clusters of two or more documents from text-dedup's union-find (``--debug``
    pickles it, keyed by the original ids), read by the peers' Python."""
    script = (
        "import json, pickle, sys\n"
        "uf = pickle.load(open(sys.argv[1], 'rb'))\n"
        "json.dump([[str(k), str(uf.find(k))] for k in list(uf.parent)], sys.stdout)\n"
    )
    done = subprocess.run(
        [python, "-c", script, str(work / "output" / "uf.pkl")],
        capture_output=True,
        text=True,
        check=True,
    )
    members: dict[str, list[str]] = defaultdict(list)
    for node, root in json.loads(done.stdout):
        members[root].append(node)
    return [group for group in members.values() if len(group) > 1]


try:  # only in the peers' virtualenv
    from datatrove.utils.word_tokenizers import WordTokenizer as _WordTokenizer
except ImportError:
    _WordTokenizer = object  # type: ignore[assignment,misc]


class SpaceTokens(_WordTokenizer):  # type: ignore[misc,valid-type]
    """datatrove's word tokenizer for the token corpus: its words are one space apart."""

    def __init__(self) -> None:
        super().__init__()

    def word_tokenize(self, text: str) -> list[str]:
        return text.split(" ")

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]


def datatrove_job(tokens: str, work: str, workers: int) -> None:
    """(run by the peers' Python) datatrove's four MinHash stages over the token files."""
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    config = MinhashConfig(
        n_grams=5,
        num_buckets=BANDS,
        hashes_per_bucket=ROWS,
        hash_config=HashConfig(precision=64),
        norm_config=TextNormConfig(
            lowercase=False,
            norm_whitespace=False,
            remove_punctuation=False,
            norm_unicode_diacritics=False,
            norm_numbers=False,
        ),
    )
    files = len(list(Path(tokens).glob("*.jsonl")))
    common = {"start_method": "fork", "skip_completed": False}

    def reader() -> JsonlReader:
        return JsonlReader(tokens, glob_pattern="*.jsonl", text_key="text", id_key="id")

    signatures = MinhashDedupSignature(
        output_folder=f"{work}/signatures", config=config, language=SpaceTokens()
    )
    buckets = MinhashDedupBuckets(
        input_folder=f"{work}/signatures", output_folder=f"{work}/buckets", config=config
    )
    clusters = MinhashDedupCluster(
        input_folder=f"{work}/buckets",
        output_folder=f"{work}/remove",
        config=config,
        save_cluster_id=True,
    )
    kept = [
        reader(),
        MinhashDedupFilter(input_folder=f"{work}/remove"),
        JsonlWriter(f"{work}/kept", compression=None),
    ]
    stages = [([reader(), signatures], files), ([buckets], BANDS), ([clusters], 1), (kept, files)]
    for number, (pipeline, tasks) in enumerate(stages):
        LocalPipelineExecutor(
            pipeline,
            tasks=tasks,
            workers=min(workers, tasks),
            logging_dir=f"{work}/logs/{number}",
            **common,
        ).run()


def datatrove_clusters(parts: list[Path], work: Path) -> list[list[str]]:
    """Clusters of two or more documents from the stage-3 files: (document's index in
    its task's input, cluster) pairs of 32-bit integers, task i having read parts[i]."""
    import struct

    members: dict[int, list[str]] = defaultdict(list)
    for rank, part in enumerate(parts):
        path = work / "remove" / f"{rank:06d}.clusters"
        if not path.exists():
            continue
        ids = [str(json.loads(line)["id"]) for line in part.open(encoding="utf-8")]
        data = path.read_bytes()
        for index, cluster in struct.iter_unpack("<II", data):
            members[cluster].append(ids[index])
    return [group for group in members.values() if len(group) > 1]


# ---------------------------------------------------------------------------- scoring


def neardup_clusters(out: Path) -> list[list[str]]:
    members: dict[str, list[str]] = defaultdict(list)
    with (out / "clusters.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            members[str(record["cluster_id"])].append(str(record["id"]))
    return [group for group in members.values() if len(group) > 1]


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    f1: float


def cluster_score(clusters: Iterable[list[str]], positives: set[tuple[str, str]]) -> Score:
    """Every two documents of a cluster as a found pair, counted without listing them."""
    cluster_of: dict[str, int] = {}
    found = 0
    for number, group in enumerate(clusters):
        found += len(group) * (len(group) - 1) // 2
        for member in group:
            cluster_of[member] = number
    hits = sum(
        1 for a, b in positives if a in cluster_of and cluster_of[a] == cluster_of.get(b, -1)
    )
    precision = hits / found if found else 0.0
    recall = hits / len(positives)
    total = precision + recall
    return Score(precision, recall, 2 * precision * recall / total if total else 0.0)


# ---------------------------------------------------------------------------- main


@dataclass
class Contender:
    name: str
    runs: list[Run] = field(default_factory=list)
    removed: int = 0
    clusters: int = 0  # of two or more
    pair_score: Score | None = None
    cluster_score: Score | None = None


def bench_peers(
    label: str,
    path: Path,
    fields: list[str],
    documents: int,
    rounds: int,
    python: str,
    positives: set[tuple[str, str]] | None,
    scratch: Path,
) -> tuple[list[Contender], list[dict[str, float]], str]:
    parts = [scratch / f"tokens-{label}" / f"part-{i}.jsonl" for i in range(os.cpu_count() or 1)]
    parts[0].parent.mkdir(parents=True, exist_ok=True)
    single = scratch / f"tokens-{label}.jsonl"
    started = time.perf_counter()
    written, differ = write_token_corpus(path, fields, single, parts)
    note = (
        f"token corpus: {written:,} of {documents:,} documents (the others have no word), "
        f"{differ} whose shingles differ from neardup's; written in "
        f"{time.perf_counter() - started:.0f} s, not timed"
    )
    print(f"{label}: {note}", file=sys.stderr, flush=True)
    neardup = Contender("neardup dedup (local engine)")
    text_dedup = Contender("text-dedup 0.4.0 MinHash")
    datatrove = Contender("datatrove 0.10.1 MinHash")
    ratios: list[dict[str, float]] = []
    for number in range(rounds):
        out = scratch / "neardup"
        neardup.runs.append(
            timed(neardup_command([str(path)], out, ["--settings", NO_NGRAM], fields))
        )
        work = scratch / f"text-dedup-{number}"
        text_dedup.runs.append(timed(text_dedup_command(python, single, work)))
        dt_work = scratch / f"datatrove-{number}"
        cores = str(os.cpu_count() or 1)
        job = [python, "-m", "bench.dedup", "--datatrove-job", str(parts[0].parent), str(dt_work)]
        job.append(cores)
        datatrove.runs.append(timed(job))
        rate = documents / neardup.runs[-1].seconds
        ratios.append(
            {
                text_dedup.name: rate / (documents / text_dedup.runs[-1].seconds),
                datatrove.name: rate / (documents / datatrove.runs[-1].seconds),
            }
        )
        print(
            f"{label} round {number + 1}: "
            + ", ".join(
                f"{c.name} {c.runs[-1].seconds:.1f} s" for c in (neardup, text_dedup, datatrove)
            )
            + f"; load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
            flush=True,
        )
    found = {
        neardup.name: neardup_clusters(scratch / "neardup"),
        text_dedup.name: text_dedup_clusters(python, scratch / f"text-dedup-{rounds - 1}"),
        datatrove.name: datatrove_clusters(parts, scratch / f"datatrove-{rounds - 1}"),
    }
    for contender in (neardup, text_dedup, datatrove):
        clusters = found[contender.name]
        contender.clusters = len(clusters)
        contender.removed = sum(len(group) - 1 for group in clusters)
        if positives is not None:
            contender.cluster_score = cluster_score(clusters, positives)
    if positives is not None:
        neardup.pair_score = Score(*f1(read_pairs(scratch / "neardup" / "pairs.jsonl"), positives))
    return [neardup, text_dedup, datatrove], ratios, note


def peers_table(contenders: list[Contender], ratios: list[dict[str, float]], documents: int) -> str:
    scored = contenders[0].cluster_score is not None
    headers = ["", "seconds", "documents/s", "CPU µs/document", "peak MB", "removed"]
    if scored:
        headers += ["cluster-pair P / R / F1", "pair F1"]
    headers.append("neardup's documents/s ÷ this one's (same round)")
    rows = []
    for contender in contenders:
        seconds = statistics.median(r.seconds for r in contender.runs)
        cpu = statistics.median(r.cpu_seconds for r in contender.runs)
        peak = statistics.median(r.peak_bytes for r in contender.runs)
        row = [
            contender.name,
            f"{seconds:,.1f}",
            f"{documents / seconds:,.0f}",
            f"{cpu / documents * 1e6:,.0f}",
            f"{peak / 2**20:,.0f}",
            f"{contender.removed:,}",
        ]
        if scored:
            score = contender.cluster_score
            assert score is not None
            row.append(f"{score.precision:.3f} / {score.recall:.3f} / {score.f1:.3f}")
            row.append("—" if contender.pair_score is None else f"{contender.pair_score.f1:.3f}")
        if contender is contenders[0]:
            row.append("")
        else:
            values = [r[contender.name] for r in ratios]
            row.append(
                f"{format_ratio(statistics.median(values))} "
                f"({format_ratio(min(values))}-{format_ratio(max(values))})"
            )
        rows.append(row)
    align = ["left"] + ["right"] * (len(headers) - 1)
    return markdown_table(headers, rows, align)  # type: ignore[arg-type]


def against_peers(arguments: argparse.Namespace) -> None:
    """--peers: neardup dedup, text-dedup and datatrove, in rounds (see above)."""
    python = str(arguments.peers / "bin" / "python")
    # The kernels compiled into numba's cache first, as the install does: a run that
    # compiled them would time some 20 s of compilation.
    subprocess.run([*NEARDUP, "warm-up"], cwd=REPO_ROOT, check=True, capture_output=True)
    os.environ.update(OFFLINE)
    loads = [os.getloadavg()[0]]
    sections = []
    with tempfile.TemporaryDirectory(prefix="neardup-bench-peers-") as scratch_name:
        scratch = Path(scratch_name)
        os.environ["HF_HOME"] = str(scratch / "hf")
        reuters = REUTERS / "reuters21578.jsonl"
        if not arguments.no_reuters and reuters.is_file():
            documents = sum(1 for line in reuters.open(encoding="utf-8") if line.strip())
            contenders, ratios, note = bench_peers(
                "reuters", reuters, ["title", "body"], documents, arguments.runs, python,
                reuters_labels(), scratch,
            )  # fmt: skip
            loads.append(os.getloadavg()[0])
            sections.append(
                f"### Reuters-21578 ({documents:,} stories; F1 against the labelled pairs "
                f"with J >= 0.8)\n\n{peers_table(contenders, ratios, documents)}\n\n{note}."
            )
        if arguments.synthetic:
            path = scratch / "synthetic.jsonl"
            write_synthetic(path, arguments.synthetic)
            size = path.stat().st_size
            contenders, ratios, note = bench_peers(
                "synthetic", path, ["text"], arguments.synthetic, arguments.runs, python, None,
                scratch,
            )  # fmt: skip
            loads.append(os.getloadavg()[0])
            sections.append(
                f"### Synthetic, {arguments.synthetic:,} documents of "
                f"{size / arguments.synthetic:,.0f} bytes ({size / 2**30:.2f} GiB of JSON "
                f"lines)\n\n{peers_table(contenders, ratios, arguments.synthetic)}\n\n{note}."
            )
    report = (
        f"## neardup dedup beside text-dedup and datatrove ({time.strftime('%Y-%m-%d')}, "
        f"{cpu_model_name()}, {os.cpu_count()} cores; medians of {arguments.runs} rounds; "
        f"1-minute load average {min(loads):.1f} to {max(loads):.1f} at the start and "
        f"after each corpus)\n\n" + "\n\n".join(sections) + "\n"
    )
    name = "dedup-peers.md"
    if arguments.no_reuters:
        name = f"dedup-peers-synthetic-{arguments.synthetic}.md"
    write_result(name, report)
    print(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synthetic", type=int, default=0, help="documents (0: none)")
    parser.add_argument("--no-reuters", action="store_true")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-datasketch", action="store_true")
    parser.add_argument("--datasketch-job", nargs="+", help=argparse.SUPPRESS)
    peers = parser.add_argument_group("beside text-dedup and datatrove")
    peers.add_argument(
        "--peers",
        type=Path,
        help="the peers' virtualenv (see --setup): run neardup dedup beside them instead "
        "(--runs rounds; bench/results/dedup-peers.md)",
    )
    peers.add_argument("--setup", type=Path, help="create this virtualenv with the peers")
    peers.add_argument("--datatrove-job", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.datasketch_job:
        path, out, *fields = arguments.datasketch_job
        datasketch_job(path, out, fields)
        return
    if arguments.datatrove_job:
        tokens, work, workers = arguments.datatrove_job
        datatrove_job(tokens, work, int(workers))
        return
    if arguments.setup:
        setup(arguments.setup)
        return
    if arguments.peers is not None:
        against_peers(arguments)
        return
    sections = []
    with tempfile.TemporaryDirectory(prefix="neardup-bench-dedup-") as scratch_name:
        scratch = Path(scratch_name)
        reuters = REUTERS / "reuters21578.jsonl"
        if arguments.no_reuters:
            pass
        elif reuters.is_file():
            documents = sum(1 for line in reuters.open(encoding="utf-8") if line.strip())
            rows = bench_corpus(
                "reuters", reuters, documents, ["title", "body"], arguments.runs,
                not arguments.no_spark, not arguments.no_datasketch, reuters_labels(), scratch,
            )  # fmt: skip
            sections.append(
                f"### Reuters-21578 ({documents:,} stories, F1 against the labelled pairs "
                f"with J >= 0.8)\n\n{table(rows, True)}"
            )
        else:
            print(f"skipped Reuters-21578: {reuters} is absent", file=sys.stderr)
        if arguments.synthetic:
            path = scratch / "synthetic.jsonl"
            write_synthetic(path, arguments.synthetic)
            size = path.stat().st_size
            rows = bench_corpus(
                "synthetic", path, arguments.synthetic, ["text"], arguments.runs,
                not arguments.no_spark, False, None, scratch,
            )  # fmt: skip
            sections.append(
                f"### Synthetic, {arguments.synthetic:,} documents of "
                f"{size / arguments.synthetic:,.0f} bytes ({size / 2**30:.2f} GiB of JSON "
                f"lines)\n\n{table(rows, False)}"
            )
    model = cpu_model_name()
    load = os.getloadavg()[2]
    report = (
        f"## neardup dedup ({time.strftime('%Y-%m-%d')}, {model}, {os.cpu_count()} cores; "
        f"medians of {arguments.runs} runs, Spark and datasketch of {max(1, arguments.runs - 1)}; "
        f"load average {load:.1f} at the end)\n\n" + "\n\n".join(sections) + "\n"
    )
    results = RESULTS
    if arguments.no_reuters:
        results = RESULTS.with_name(f"dedup-synthetic-{arguments.synthetic}.md")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
