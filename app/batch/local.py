"""The local engine of ``neardup dedup``: batch mode on one machine, every core.

1. **Fingerprints**, streamed: the input is read in chunks of ``chunk_size`` documents;
   worker processes fingerprint them (the service's ``fingerprint_nonempty``, the same
   settings) while the main process reads the next ones. Per document the main process
   keeps its SimHash (8 bytes), exact hash (16), band keys (8 per band) and id; the
   MinHash signatures' kept bits (2 bytes x num_perm, what verification compares:
   app/core/lsh.py) go to a file that is memory-mapped for verification, so that memory
   does not grow with the texts or the signatures.
2. **Identical documents** (equal exact hashes, so the same normalised text) are grouped
   by one sort; each group is matched once, through its first document.
3. **Batch mode** (Manku et al. 2007, section 3.1.1): one sort of each SimHash
   permutation table (its leading blocks as key) and of each MinHash band table; every
   two documents in a run of equal keys are a candidate, emitted by the first table
   where they meet and verified there (Hamming distance; equal signature values). Short
   texts go to one n-gram index, searched with each of them (exact q-gram Jaccard).
   Tables and bands run in threads (the kernels release the GIL).
4. The union of the pairs is scored by the service's rule (app.batch.rules), expanded to
   the members of the groups, and sorted by (a, b) in input order.
5. **Clusters**: union-find over the pairs; a cluster is named by its first document in
   input order, and that document's input record is the one kept.

Costs for N documents of c characters: O(N c) to fingerprint, O(N log N) per table and
band, plus the candidate runs (about N / 2^prefix_bits documents a run for random
fingerprints; more where many documents are alike) and the output, which is quadratic
in the size of a cluster of identical documents.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from app.batch import _kernels as kernels
from app.batch.local_pairs import band_pairs, ngram_pairs, simhash_pairs
from app.batch.passages import PassagePair, document_host, shared_passages_of
from app.batch.readers import (
    DocumentId,
    Fields,
    InputError,
    JobOptions,
    Split,
    document_id,
    input_bytes,
    plan_splits,
    read_records,
    read_timed_documents,
    timestamp_us,
)
from app.batch.rules import (
    MatchRule,
    Summary,
    check_batch_settings,
    cluster_line,
    document_text,
    pair_line,
)
from app.collection_config import CollectionConfig
from app.core.lsh import kept_values

Rows = npt.NDArray[np.int64]
DEFAULT_CHUNK_SIZE = 4096
# Input bytes per worker process when --workers is not given: below it, the process's
# start costs more than it saves (Reuters-21578, 21 MB: one process is faster).
WORKER_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Options(JobOptions):
    """How to run on this machine: how much to use."""

    workers: int = 0  # 0: every core for inputs of WORKER_BYTES or more, fewer below
    chunk_size: int = DEFAULT_CHUNK_SIZE
    temp_dir: Path | None = None  # where the signature file goes (default: out)

    def worker_count(self, input_bytes: int | None = None) -> int:
        """Worker processes: as asked, else every core, but no more than one per
        WORKER_BYTES of input (a process costs its start and its imports, ~0.5 s)."""
        if self.workers:
            return self.workers
        cores = len(os.sched_getaffinity(0))
        if input_bytes is None:
            return cores
        return max(1, min(cores, input_bytes // WORKER_BYTES))


@dataclass(frozen=True, slots=True)
class ChunkFingerprints:
    """What a worker returns for a chunk: rows for its non-empty documents only."""

    kept: Rows  # positions in the chunk
    simhash: npt.NDArray[np.uint64]
    exact: npt.NDArray[np.uint64]
    band_keys: npt.NDArray[np.uint64]  # of the whole signature values
    signatures: npt.NDArray[np.uint16]  # their kept bits
    shorts: list[tuple[int, str]]  # (row in the chunk's kept, normalised short text)


def fingerprint_chunk(texts: list[str], config: CollectionConfig, html: bool) -> ChunkFingerprints:
    """Fingerprints of one chunk with the service's code and settings; with ``html``,
    of the text each page is read as (``read_page``, by the settings' html.extract), as
    the service reads a document sent with ``"html": true``."""
    rule = MatchRule(config)
    if html:
        texts = [document_text(text, config, html) for text in texts]
    fingerprints, kept = config.fingerprints(texts)
    signatures = fingerprints.minhash
    shorts = fingerprints.shorts or []
    return ChunkFingerprints(
        kept=kept,
        simhash=fingerprints.simhash,
        exact=fingerprints.exact,
        band_keys=rule.band_keys(signatures),
        signatures=np.ascontiguousarray(kept_values(signatures)),
        shorts=[(row, text) for row, text in enumerate(shorts) if text is not None],
    )


def _progress(options: Options, **kwargs: Any) -> Any:
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: worker processes are forked
    return tqdm(disable=not options.progress, dynamic_ncols=True, **kwargs)


# ---------------------------------------------------------------------------- phase 1


@dataclass
class Corpus:
    """Fingerprints of every document, row i for the i-th non-empty one."""

    ids: list[DocumentId]  # every document, by position
    positions: Rows  # position of each non-empty document
    simhash: npt.NDArray[np.uint64]
    exact: npt.NDArray[np.uint64]
    band_keys: npt.NDArray[np.uint64]
    signatures: npt.NDArray[np.uint16]  # memory-mapped
    shorts: dict[int, str]  # row -> normalised text of the short ones
    split_counts: list[int]  # documents of each split
    times: Rows | None = None  # microseconds, by position (with a timestamp field only)

    @property
    def documents(self) -> int:
        return len(self.ids)


def _chunks(
    splits: Sequence[Split], fields: Fields, chunk_size: int, split_counts: list[int]
) -> Iterator[tuple[list[DocumentId], list[str], list[int]]]:
    """(ids, texts, times) of the input's documents, ``chunk_size`` at a time, ids checked
    (times in microseconds, with a timestamp field; else empty); appends each split's
    number of documents to ``split_counts``."""
    seen: dict[DocumentId, int] = {}
    ids: list[DocumentId] = []
    texts: list[str] = []
    times: list[int] = []
    timed = fields.timestamp_field is not None
    position = 0
    for split in splits:
        split_first = position
        for value, text, moment in read_timed_documents(split, fields):
            identifier = document_id(value, position, split)
            earlier = seen.setdefault(identifier, position)
            if earlier != position:
                raise InputError(
                    f"{split.path}: the id {identifier!r} is used twice (documents "
                    f"{earlier} and {position} of the input); ids must be unique"
                )
            ids.append(identifier)
            texts.append(text)
            if timed:
                times.append(timestamp_us(moment, position, split, fields))
            position += 1
            if len(texts) == chunk_size:
                yield ids, texts, times
                ids, texts, times = [], [], []
        split_counts.append(position - split_first)
    if texts:
        yield ids, texts, times


def fingerprint_corpus(
    splits: Sequence[Split], config: CollectionConfig, options: Options, scratch: Path
) -> Corpus:
    """Read and fingerprint every document, chunks in worker processes."""
    rule = MatchRule(config)
    workers = options.worker_count(input_bytes([split.path for split in splits]))
    ids: list[DocumentId] = []
    parts: list[ChunkFingerprints] = []
    position_parts: list[Rows] = []
    shorts: dict[int, str] = {}
    split_counts: list[int] = []
    time_parts: list[Rows] = []
    signature_path = scratch / "signatures.u16"
    rows = 0
    executor: Executor | None = None
    if workers > 1:
        executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        with (
            open(signature_path, "wb") as signature_file,
            _progress(options, desc="fingerprints", unit=" docs", unit_scale=True) as bar,
        ):
            pending: deque[tuple[int, Future[ChunkFingerprints] | ChunkFingerprints]] = deque()
            chunks = _chunks(splits, options.fields, options.chunk_size, split_counts)

            def collect(first: int, result: ChunkFingerprints) -> None:
                nonlocal rows
                parts.append(
                    ChunkFingerprints(
                        result.kept,
                        result.simhash,
                        result.exact,
                        result.band_keys,
                        np.zeros((0, 0), np.uint16),
                        [],
                    )
                )
                position_parts.append(result.kept + first)
                signature_file.write(result.signatures.tobytes())
                for row, text in result.shorts:
                    shorts[rows + row] = text
                rows += len(result.kept)

            def drain(limit: int) -> None:
                while len(pending) > limit:
                    first, item = pending.popleft()
                    done = item.result() if isinstance(item, Future) else item
                    collect(first, done)

            for chunk_ids, texts, chunk_times in chunks:
                first = len(ids)
                ids += chunk_ids
                if chunk_times:
                    time_parts.append(np.array(chunk_times, dtype=np.int64))
                if executor is None:
                    pending.append((first, fingerprint_chunk(texts, config, options.html)))
                else:
                    pending.append(
                        (first, executor.submit(fingerprint_chunk, texts, config, options.html))
                    )
                drain(2 * workers)
                bar.update(len(texts))
            drain(0)
    finally:
        if executor is not None:
            executor.shutdown(cancel_futures=True)
    width = rule.num_perm
    signatures: npt.NDArray[np.uint16]
    if rows and width:
        signatures = np.memmap(signature_path, dtype=np.uint16, mode="r", shape=(rows, width))
    else:
        signatures = np.zeros((rows, width), dtype=np.uint16)
    bands = rule.bands
    times: Rows | None = None
    if options.fields.timestamp_field is not None:
        times = np.concatenate(time_parts) if time_parts else np.zeros(0, np.int64)

    def joined(name: str, dtype: Any, shape: tuple[int, ...]) -> Any:
        arrays = [getattr(part, name) for part in parts]
        return np.concatenate(arrays) if arrays else np.zeros(shape, dtype=dtype)

    return Corpus(
        ids=ids,
        positions=np.concatenate(position_parts).astype(np.int64)
        if position_parts
        else np.zeros(0, np.int64),
        simhash=joined("simhash", np.uint64, (0,)),
        exact=joined("exact", np.uint64, (0, 2)),
        band_keys=joined("band_keys", np.uint64, (0, bands)),
        signatures=signatures,
        shorts=shorts,
        split_counts=split_counts,
        times=times,
    )


# ---------------------------------------------------------------------------- phase 2


@dataclass(frozen=True, slots=True)
class Groups:
    """Documents with equal exact hashes. Group g (numbered in the order of its first
    document) has the rows ``members[start[g]:start[g+1]]`` (ascending); its first is
    ``rep[g]``."""

    rep: Rows
    start: Rows
    members: Rows

    @property
    def sizes(self) -> Rows:
        return np.diff(self.start)


def group_identical(exact: npt.NDArray[np.uint64]) -> Groups:
    """One sort of the exact hashes."""
    count = len(exact)
    if count == 0:
        empty = np.zeros(0, np.int64)
        return Groups(empty, np.zeros(1, np.int64), empty)
    order = np.lexsort((np.arange(count), exact[:, 1], exact[:, 0]))
    ordered = exact[order]
    new = np.ones(count, dtype=np.bool_)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    group_in_sort = np.cumsum(new) - 1
    firsts = order[new]  # first row of each group, groups in hash order
    rank = np.empty(len(firsts), dtype=np.int64)
    rank[np.argsort(firsts, kind="stable")] = np.arange(len(firsts))
    group_of_row = np.empty(count, dtype=np.int64)
    group_of_row[order] = rank[group_in_sort]
    members = np.lexsort((np.arange(count), group_of_row)).astype(np.int64)
    start = np.searchsorted(group_of_row[members], np.arange(len(firsts) + 1)).astype(np.int64)
    return Groups(np.sort(firsts).astype(np.int64), start, members)


# ---------------------------------------------------------------------------- phase 3


@dataclass(frozen=True, slots=True)
class Pairs:
    """Matching pairs (a < b), their method bits and similarity: of representatives
    (group numbers) from ``match_representatives``, of documents (input positions,
    sorted) in a ``Result``."""

    a: Rows
    b: Rows
    bits: npt.NDArray[np.uint8]
    similarity: npt.NDArray[np.float64]


def texts_at(
    splits: Sequence[Split], config: CollectionConfig, options: Options, positions: Rows
) -> dict[int, str]:
    """The texts (as fingerprinted) of the documents at some input positions: one pass
    over the input, only those kept."""
    wanted = set(positions.tolist())
    texts: dict[int, str] = {}
    position = 0
    for _, chunk, _ in _chunks(splits, options.fields, options.chunk_size, []):
        for text in chunk:
            if position in wanted:
                texts[position] = document_text(text, config, options.html)
            position += 1
    return texts


def match_representatives(
    rule: MatchRule,
    corpus: Corpus,
    groups: Groups,
    options: Options,
    splits: Sequence[Split] = (),
) -> Pairs:
    """Every matching pair of distinct normalised texts, by batch mode; the MinHash
    pairs near the threshold decided by their texts, read again from ``splits``."""
    reps = groups.rep
    simhash = corpus.simhash[reps]
    band_keys = np.ascontiguousarray(corpus.band_keys[reps])
    signatures = np.asarray(corpus.signatures).view(np.ndarray)
    short_reps = [g for g, row in enumerate(reps.tolist()) if row in corpus.shorts]
    tables = len(rule.table_masks) if rule.simhash_on else 0
    steps = tables + rule.bands + int(rule.ngram_on)
    found_a: list[Rows] = []
    found_b: list[Rows] = []
    ngram: tuple[Rows, Rows, npt.NDArray[np.float64]] | None = None
    with (
        ThreadPoolExecutor(options.worker_count()) as pool,
        _progress(options, desc="pairs", unit=" tables", total=steps) as bar,
    ):
        futures: list[Future[tuple[Rows, Rows]]] = []
        for table in range(tables):
            futures.append(pool.submit(simhash_pairs, rule, simhash, table))
        for band in range(rule.bands):
            futures.append(pool.submit(band_pairs, rule, band_keys, band, signatures, reps))
        for future in futures:
            a, b = future.result()
            found_a.append(a)
            found_b.append(b)
            bar.update()
        if rule.ngram_on and len(short_reps) > 1:
            texts = [corpus.shorts[int(reps[g])] for g in short_reps]
            earlier, later, jaccard = ngram_pairs(rule, texts, pool)
            index_of = np.array(short_reps, dtype=np.int64)
            ngram = (index_of[earlier], index_of[later], jaccard)
            found_a.append(ngram[0])
            found_b.append(ngram[1])
        bar.update(int(rule.ngram_on))
    a = np.concatenate(found_a) if found_a else np.zeros(0, np.int64)
    b = np.concatenate(found_b) if found_b else np.zeros(0, np.int64)
    packed = np.unique((a << 32) | b)
    a, b = packed >> 32, packed & 0xFFFFFFFF
    ngram_similarity = np.full(len(packed), np.nan)
    if ngram is not None:
        at = np.searchsorted(packed, (ngram[0] << 32) | ngram[1])
        ngram_similarity[at] = ngram[2]
    if rule.num_perm:
        agree = kernels.agreement(a, b, signatures, reps)
        shared = kernels.any_equal_lane(band_keys, a, b)
    else:
        agree = np.zeros(len(a), np.int64)
        shared = np.zeros(len(a), np.bool_)
    bits, similarity = rule.evaluate(
        np.zeros(len(a), np.bool_), simhash[a], simhash[b], agree, shared, ngram_similarity
    )
    assert bool((bits != 0).all()), "a candidate kept without a method"
    unsure = rule.unsure(bits, agree)
    if len(unsure):
        needed = np.unique(np.concatenate([a[unsure], b[unsure]]))
        position_of = corpus.positions[reps]
        kept_texts = texts_at(splits, rule.config, options, position_of[needed])
        bits, similarity = rule.decided(
            a,
            b,
            bits,
            agree,
            similarity,
            ngram_similarity,
            lambda group: kept_texts.get(int(position_of[group])),
        )
        matched = bits != 0
        a, b, bits, similarity = a[matched], b[matched], bits[matched], similarity[matched]
    return Pairs(a, b, bits, similarity)


# ---------------------------------------------------------------------------- phase 4, 5


@dataclass(frozen=True, slots=True)
class Result:
    """The pairs of documents and each document's cluster."""

    pairs: Pairs
    cluster: Rows  # position -> position of its cluster's first document
    empty: int


def expand(rule: MatchRule, corpus: Corpus, groups: Groups, pairs: Pairs) -> Result:
    """Document pairs and clusters from the representatives' pairs (within the match
    window, with one: ``_expand_in_window``)."""
    window = rule.config.match_window_us
    if window is not None:
        assert corpus.times is not None, "a match window needs the documents' times"
        return _expand_in_window(rule, corpus, groups, pairs, corpus.times, window)
    sizes = groups.sizes
    members = corpus.positions[groups.members]
    across = int((sizes[pairs.a] * sizes[pairs.b]).sum())
    within = int((sizes * (sizes - 1) // 2).sum())
    x, y, source = (np.empty(across, np.int64) for _ in range(3))
    wx, wy, wgroup = (np.empty(within, np.int64) for _ in range(3))
    same_time = np.zeros(len(members), np.int64)  # every pair of the groups: one window
    kernels.expand_pairs(
        (pairs.a, pairs.b), (groups.start, members), same_time, 0, (x, y, source), (wx, wy, wgroup),
        True,
    )  # fmt: skip
    joined = _joined_pairs(rule, corpus, groups, pairs, (x, y, source), (wx, wy, wgroup))
    root = kernels.components(len(groups.rep), pairs.a, pairs.b)
    cluster = np.arange(corpus.documents, dtype=np.int64)
    group_of_member = np.repeat(np.arange(len(groups.rep)), sizes)
    cluster[members] = corpus.positions[groups.rep[root[group_of_member]]]
    return Result(joined, cluster, corpus.documents - len(corpus.positions))


def _expand_in_window(
    rule: MatchRule, corpus: Corpus, groups: Groups, pairs: Pairs, times: Rows, window: int
) -> Result:
    """Document pairs whose times are at most ``window`` apart, and the connected
    components of those pairs: with a window, two copies of one text may be apart in
    time, so a group of identical documents is no longer one cluster. Each group's
    members are sorted by time, and every pair is found by a sliding range of the other
    group's (or the same group's) members: the cost is the pairs written, not the
    products of the group sizes."""
    member_rows = groups.members
    group_of_member = np.repeat(np.arange(len(groups.rep)), groups.sizes)
    members = corpus.positions[member_rows]
    member_times = times[members]
    by_time = np.lexsort((members, member_times, group_of_member))
    members, member_times = members[by_time], member_times[by_time]
    empty = np.zeros(0, np.int64)
    arguments = ((pairs.a, pairs.b), (groups.start, members), member_times, window)
    nothing = (empty, empty, empty)
    across, within = kernels.expand_pairs(*arguments, nothing, nothing, False)
    x, y, source = (np.empty(across, np.int64) for _ in range(3))
    wx, wy, wgroup = (np.empty(within, np.int64) for _ in range(3))
    kernels.expand_pairs(*arguments, (x, y, source), (wx, wy, wgroup), True)
    joined = _joined_pairs(rule, corpus, groups, pairs, (x, y, source), (wx, wy, wgroup))
    # Positions are in input order, so each component is named by its first document.
    cluster = kernels.components(corpus.documents, joined.a, joined.b)
    return Result(joined, cluster, corpus.documents - len(corpus.positions))


def _joined_pairs(
    rule: MatchRule,
    corpus: Corpus,
    groups: Groups,
    pairs: Pairs,
    across: tuple[Rows, Rows, Rows],
    within: tuple[Rows, Rows, Rows],
) -> Pairs:
    """The pairs across groups (x, y, the representatives' pair) and within groups (x,
    y, the group) as one list sorted by (x, y), with their method bits and similarity."""
    x, y, source = across
    wx, wy, wgroup = within
    short = np.array([row in corpus.shorts for row in groups.rep.tolist()], dtype=np.bool_)
    within_bits = np.where(
        short[wgroup], rule.within_group_bits(True), rule.within_group_bits(False)
    ).astype(np.uint8)
    all_x = np.concatenate([x, wx])
    all_y = np.concatenate([y, wy])
    bits = np.concatenate([pairs.bits[source], within_bits])
    similarity = np.concatenate([pairs.similarity[source], np.ones(len(wx))])
    order = np.argsort((all_x << 32) | all_y, kind="stable")
    return Pairs(all_x[order], all_y[order], bits[order], similarity[order])


# ---------------------------------------------------------------------------- phase 6


def write_outputs(
    result: Result,
    ids: Sequence[DocumentId],
    splits: Sequence[Split],
    split_counts: Sequence[int],
    options: Options,
    dropped: set[int] | None = None,
) -> int:
    """pairs.jsonl, clusters.jsonl and kept.jsonl (without the ``dropped`` positions);
    returns the number of clusters."""
    out = options.out
    with (
        open(out / "pairs.jsonl", "wb", buffering=1 << 20) as handle,
        _progress(options, desc="pairs.jsonl", unit=" pairs", total=len(result.pairs.a)) as bar,
    ):
        _write_pairs(handle, result.pairs, ids, bar)
    with (
        open(out / "clusters.jsonl", "wb", buffering=1 << 20) as handle,
        _progress(options, desc="clusters.jsonl", unit=" docs", total=len(ids)) as bar,
    ):
        for start in range(0, len(ids), 65536):
            clusters = result.cluster[start : start + 65536].tolist()
            handle.writelines(cluster_line(ids[start + i], ids[c]) for i, c in enumerate(clusters))
            bar.update(len(clusters))
    kept = np.flatnonzero(result.cluster == np.arange(len(ids)))
    if dropped:
        kept = kept[~np.isin(kept, np.array(sorted(dropped), dtype=np.int64))]
    write_kept(out / "kept.jsonl", splits, split_counts, kept, options)
    return int(np.count_nonzero(result.cluster == np.arange(len(ids))))


def _write_pairs(handle: IO[bytes], pairs: Pairs, ids: Sequence[DocumentId], bar: Any) -> None:
    step = 65536
    for start in range(0, len(pairs.a), step):
        end = start + step
        handle.writelines(
            pair_line(ids[x], ids[y], similarity, bits)
            for x, y, similarity, bits in zip(
                pairs.a[start:end].tolist(),
                pairs.b[start:end].tolist(),
                pairs.similarity[start:end].tolist(),
                pairs.bits[start:end].tolist(),
                strict=True,
            )
        )
        bar.update(min(step, len(pairs.a) - start))


def write_kept(
    path: Path,
    splits: Sequence[Split],
    split_counts: Sequence[int],
    kept: Rows,
    options: Options,
) -> None:
    """The input records at the positions ``kept`` (ascending): a second pass over the
    splits that hold any."""
    bounds = np.concatenate([[0], np.cumsum(split_counts, dtype=np.int64)])
    starts = np.searchsorted(kept, bounds)
    with (
        open(path, "wb", buffering=1 << 20) as handle,
        _progress(options, desc="kept.jsonl", unit=" docs", total=len(kept)) as bar,
    ):
        for number, split in enumerate(splits):
            local = (kept[starts[number] : starts[number + 1]] - bounds[number]).tolist()
            for _, line in read_records(split, local):
                handle.write(line + b"\n")
                bar.update()


# ---------------------------------------------------------------------------- the job


def run(paths: Sequence[str], config: CollectionConfig, options: Options) -> Summary:
    """De-duplicate the input files into options.out."""
    started = time.perf_counter()
    check_batch_settings(config, options.fields.timestamp_field)
    options.out.mkdir(parents=True, exist_ok=True)
    splits = plan_splits(paths, options.format, split_bytes=1 << 62)
    rule = MatchRule(config, options.simhash_blocks)
    with tempfile.TemporaryDirectory(
        prefix=".neardup-dedup-", dir=options.temp_dir or options.out
    ) as scratch:
        corpus = fingerprint_corpus(splits, config, options, Path(scratch))
        groups = group_identical(corpus.exact)
        pairs = match_representatives(rule, corpus, groups, options, splits)
        result = expand(rule, corpus, groups, pairs)
    shared: list[PassagePair] | None = None
    dropped: set[int] = set()
    if options.passages or options.drop_contained:
        shared = find_passages(splits, config, options, corpus.ids)
        if options.drop_contained:
            dropped = {p for pair in shared if (p := pair.contained()) is not None}
            dropped -= set(np.flatnonzero(result.cluster != np.arange(corpus.documents)).tolist())
    clusters = write_outputs(result, corpus.ids, splits, corpus.split_counts, options, dropped)
    return Summary(
        engine="local",
        documents=corpus.documents,
        empty=result.empty,
        pairs=len(result.pairs.a),
        clusters=clusters,
        seconds=time.perf_counter() - started,
        passage_pairs=None if shared is None else len(shared),
        contained=len(dropped) if options.drop_contained else None,
    )


def find_passages(
    splits: Sequence[Split], config: CollectionConfig, options: Options, ids: list[DocumentId]
) -> list[PassagePair]:
    """passages.jsonl (app/batch/passages.py) over the input's texts, read as the
    fingerprints read them."""

    hosts: list[int] = []  # each document's host (app/core/hosts.py), from the first read

    def texts() -> Iterator[str]:
        reading = not hosts
        for _, chunk, _ in _chunks(splits, options.fields, options.chunk_size, []):
            for text in chunk:
                if reading:
                    hosts.append(document_host(ids[len(hosts)], text, options.html))
                yield document_text(text, config, options.html)

    return shared_passages_of(
        texts, config.passages, ids, options.out / "passages.jsonl", lambda: hosts
    )
