"""neardup dedup on a whole corpus: documents/s, peak memory and F1, beside datasketch.

Run from the repository root::

    .venv/bin/python bench/dedup.py [--runs 3] [--synthetic 1000000] [--no-spark]

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
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REUTERS = REPO_ROOT.parent / "shared/data/reuters21578"
RESULTS = REPO_ROOT / "bench" / "results" / "dedup.md"
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
    for field in fields:
        command += ["--text-field", field]
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
        command = [sys.executable, __file__, "--datasketch-job", str(path), str(out_file), *fields]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synthetic", type=int, default=0, help="documents (0: none)")
    parser.add_argument("--no-reuters", action="store_true")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-datasketch", action="store_true")
    parser.add_argument("--datasketch-job", nargs="+", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.datasketch_job:
        path, out, *fields = arguments.datasketch_job
        datasketch_job(path, out, fields)
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
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
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
