"""Shared passages in ``neardup dedup --passages`` (the local engine): the service's
passage rule (app/core/passages.py, app/service/passages.py) over a whole corpus.

1. Each document's winnowed fingerprints (the collection's passages settings).
2. Candidate pairs by one sort of all fingerprints: two documents holding the same one
   are a candidate; a fingerprint more than ``max_rows`` documents hold is boilerplate and
   pairs nothing, as in the service.
3. The texts of the documents in a candidate pair, read again from the input, and each
   pair verified token by token (``shared_passages``): the pairs with passages, their
   offsets (code points into each text as read) and coverages.

Memory: the fingerprints of every document (8 bytes each, some 110 for a 3 KB text) and
the texts of the documents in candidate pairs while they are verified.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

from app.collection_config import PassagesConfig
from app.core.hosts import NO_HOST, corpus_chrome, host_key, without_chrome
from app.core.passages import Tokens, coverage, kgrams, shared_passages, tokenize
from app.core.types import Rows
from app.service.passages import CONTAINED, shared_counts

CHUNK = 1024  # texts fingerprinted a compiled call


@dataclass(frozen=True, slots=True)
class PassagePair:
    """Documents ``a`` < ``b`` (input positions) sharing passages: the passages as (a
    start, a end, b start, b end) code points, and the share of each text inside them."""

    a: int
    b: int
    spans: list[tuple[int, int, int, int]]
    a_coverage: float
    b_coverage: float

    def line(self, a_id: object, b_id: object) -> bytes:
        spans = [
            {"a_start": s[0], "a_end": s[1], "b_start": s[2], "b_end": s[3]} for s in self.spans
        ]
        record = {
            "a": a_id,
            "b": b_id,
            "a_coverage": self.a_coverage,
            "b_coverage": self.b_coverage,
            "passages": spans,
        }
        return orjson.dumps(record) + b"\n"

    def contained(self) -> int | None:
        """The position of the document at least CONTAINED inside the other (the later
        one when both are), or None."""
        if self.b_coverage >= CONTAINED:
            return self.b
        if self.a_coverage >= CONTAINED:
            return self.a
        return None


def document_host(identifier: object, text: str, html: bool) -> int:
    """A corpus document's host's key (app/core/hosts.py): its id where that is a URL (a
    WARC page's), else a page's canonical link or og:url. Both engines' one rule."""
    named = {"url": identifier} if isinstance(identifier, str) else None
    return host_key(named, text if html else None)


def document_fingerprints(
    texts: Iterable[str], config: PassagesConfig
) -> list[npt.NDArray[np.uint64]]:
    """Each text's winnowed fingerprints, in order, CHUNK texts a compiled call.
    O(text) each."""
    keys: list[npt.NDArray[np.uint64]] = []
    remaining = iter(texts)
    while chunk := list(itertools.islice(remaining, CHUNK)):
        keys.extend(config.fingerprints(chunk))
    return keys


def candidate_pairs(keys: Sequence[npt.NDArray[np.uint64]], max_rows: int) -> tuple[Rows, Rows]:
    """(a, b) with a < b, each pair once, sorted: the documents that hold a fingerprint
    in common that at most ``max_rows`` documents hold (the service's shared_counts)."""
    shared = shared_counts(list(keys), max_rows)
    order = np.lexsort((shared.later, shared.earlier))
    return shared.earlier[order], shared.later[order]


def verified_pair(
    first: int,
    second: int,
    texts: tuple[str, str],
    tokens: tuple[Tokens, Tokens],
    config: PassagesConfig,
    chrome: tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]] | None = None,
) -> PassagePair | None:
    """The candidate pair (``first`` < ``second``, input positions) verified token by
    token: its passages and coverages, or None when it shares no passage; ``chrome``:
    (first's fingerprints, its host's chrome), for two pages of one host
    (``Chrome.of_pair``). Both engines' one rule."""
    passages = shared_passages(tokens[0], tokens[1], config.k, config.min_tokens)
    if chrome is not None and passages:
        grams = kgrams(tokens[0], config.k)
        passages = without_chrome(passages, tokens[0].starts, grams, *chrome, config.k)
    if not passages:
        return None
    return PassagePair(
        first,
        second,
        [(p.start, p.end, p.match_start, p.match_end) for p in passages],
        round(coverage(passages, len(texts[0])), 6),
        round(coverage(passages, len(texts[1]), of_match=True), 6),
    )


def verified_pairs(
    a: Rows,
    b: Rows,
    text_of: Callable[[int], str],
    config: PassagesConfig,
    chrome: Chrome | None = None,
) -> list[PassagePair]:
    """The candidate pairs with passages, in (a, b) order, each text tokenised once; with
    ``chrome``, a pair of pages of one host without that host's chrome passages
    (app/core/hosts.py), as the service answers."""
    tokens: dict[int, Tokens] = {}

    def tokens_of(position: int) -> Tokens:
        if position not in tokens:
            tokens[position] = tokenize(text_of(position))
        return tokens[position]

    found: list[PassagePair] = []
    for first, second in zip(a.tolist(), b.tolist(), strict=True):
        pair = verified_pair(
            first,
            second,
            (text_of(first), text_of(second)),
            (tokens_of(first), tokens_of(second)),
            config,
            chrome.of_pair(first, second) if chrome is not None else None,
        )
        if pair is not None:
            found.append(pair)
    return found


@dataclass(frozen=True, slots=True)
class Chrome:
    """A corpus's hosts (a key a document; NO_HOST: none), each document's fingerprints
    and those that are its host's chrome (``hosts.corpus_chrome``)."""

    hosts: Sequence[int]
    keys: Sequence[npt.NDArray[np.uint64]]
    chrome: Sequence[npt.NDArray[np.uint64]]

    @staticmethod
    def of(keys: Sequence[npt.NDArray[np.uint64]], hosts: Sequence[int]) -> Chrome:
        return Chrome(hosts, keys, corpus_chrome(keys, hosts))

    def of_pair(
        self, first: int, second: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]] | None:
        """(first's fingerprints, its host's chrome among them) where both documents are
        pages of one host with chrome, else None."""
        host = self.hosts[first]
        if host == NO_HOST or host != self.hosts[second] or not len(self.chrome[first]):
            return None
        return self.keys[first], self.chrome[first]


def shared_passages_of(
    texts: Callable[[], Iterable[str]],
    config: PassagesConfig,
    ids: Sequence[object],
    path: Path,
    hosts: Callable[[], Sequence[int]] | None = None,
) -> list[PassagePair]:
    """The pairs of a corpus sharing passages, written to ``path`` as JSON lines, (a, b)
    in input order. ``texts`` reads the corpus again on each call: once to fingerprint,
    once for the texts of the candidates (those alone are held). ``hosts``: each
    document's host's key, known once ``texts`` was read (None: no hosts)."""
    keys = document_fingerprints(texts(), config)
    a, b = candidate_pairs(keys, config.max_rows)
    wanted = set(a.tolist()) | set(b.tolist())
    held = {position: text for position, text in enumerate(texts()) if position in wanted}
    chrome = None if hosts is None else Chrome.of(keys, hosts())
    shared = verified_pairs(a, b, held.__getitem__, config, chrome)
    with open(path, "wb", buffering=1 << 20) as handle:
        handle.writelines(pair.line(ids[pair.a], ids[pair.b]) for pair in shared)
    return shared
