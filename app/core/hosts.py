"""A site's boilerplate is not evidence: passages that one host repeats on its pages.

A document's host is what its metadata or its page says it is: ``metadata.url`` (a
crawler's, or WARC-Target-URI, which ``neardup insert --warc`` and ``neardup dedup``
put there), else the page's ``<link rel=canonical>``, else its ``og:url``. A host is its
lower-cased name without a leading ``www.``, kept as a 32-bit hash (``host_key``; 0: no
host known).

The rule, one place for both backends and ``neardup dedup``: a fingerprint of a document
that at least HOST_PAGES - 1 other pages of its host hold (so HOST_PAGES pages with it) is
that host's chrome. Between two pages of that host it neither seeds a candidate (it is
not counted as shared) nor makes a passage: a passage of chrome alone is dropped from
what the two share (``without_chrome``). Pages of other hosts,
and documents with no host, keep the document-frequency cap alone. Two pages of one
host that share a story (the same article on two paths, a roundup holding one of its
stories) still share it: a story is on two pages, chrome on every page.

No I/O. Costs: ``host_key`` O(url); ``page_url`` a regex over the page's head;
``host_hits`` O(h) for h index hits, compiled; ``without_chrome`` O(n) for n query tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import xxhash

from app.core import _candidate_kernels as kernels
from app.core.types import Rows

# Pages of one host holding a fingerprint for it to be chrome: two pages may share a
# story (a page and its print version, a roundup and one of its stories); a sign-up box,
# a footer or a share line is on every page.
HOST_PAGES = 3
NO_HOST = 0
# A passage between pages of one host with fewer fingerprints than this beyond the host's
# chrome is chrome: winnowing may pick a k-gram or two at a chrome passage's ends in one
# page and not in the others; a story holds one every 4.5 tokens (2 / (window + 1)).
CONTENT_KEYS = 3

# The page's head holds its canonical link and og:url; a page's first 64 KB hold its head.
_HEAD = 65_536
_CANONICAL = re.compile(
    r"""<link\b(?=[^>]*\brel\s*=\s*["']?canonical\b)[^>]*?\bhref\s*=\s*["']?([^"'\s>]+)""",
    re.IGNORECASE,
)
_CANONICAL_REVERSED = re.compile(
    r"""<link\b[^>]*?\bhref\s*=\s*["']?([^"'\s>]+)[^>]*?\brel\s*=\s*["']?canonical\b""",
    re.IGNORECASE,
)
_OG_URL = re.compile(
    r"""<meta\b(?=[^>]*\bproperty\s*=\s*["']?og:url\b)[^>]*?\bcontent\s*=\s*["']?([^"'\s>]+)""",
    re.IGNORECASE,
)


def url_host(url: str) -> str | None:
    """The host an absolute http(s) URL names, lower case, without ``www.``; None for
    anything else (a relative link names no host)."""
    try:
        parts = urlsplit(url.strip())
        name = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not name:
        return None
    return name.removeprefix("www.") or None


def page_url(html: str) -> str | None:
    """The URL a page gives for itself: its canonical link, else its og:url."""
    head = html[:_HEAD]
    for pattern in (_CANONICAL, _CANONICAL_REVERSED, _OG_URL):
        found = pattern.search(head)
        if found and url_host(found.group(1)):
            return found.group(1)
    return None


def host_key(metadata: Mapping[str, Any] | None, html: str | None = None) -> int:
    """A document's host as a nonzero 32-bit key: from ``metadata["url"]``, else the
    page's own URL (``page_url``); NO_HOST where neither names one."""
    url = metadata.get("url") if metadata else None
    host = url_host(url) if isinstance(url, str) else None
    if host is None and html is not None:
        own = page_url(html)
        host = url_host(own) if own else None
    if host is None:
        return NO_HOST
    return xxhash.xxh32_intdigest(host.encode("utf-8", "surrogatepass")) or 1


def host_hits(
    positions: Rows,
    rows: Rows,
    entry_hosts: npt.NDArray[np.uint32],
    key_bounds: Rows,
    hosts: Sequence[int],
    excludes: Sequence[int],
) -> tuple[npt.NDArray[np.bool_], Rows]:
    """(keep, pages) of an index's hits for several documents, the rule in one compiled
    pass (``_candidate_kernels.host_hits``): hit i is fingerprint ``positions[i]`` (document
    t's at ``[key_bounds[t], key_bounds[t + 1])``) held by row ``rows[i]`` of host
    ``entry_hosts[i]``; ``pages[p]`` the other pages of its document's host (``hosts``)
    holding fingerprint p; ``keep[i]`` False for a document's own row (``excludes``) and
    for a page of its host holding a fingerprint of its chrome (HOST_PAGES - 1 other
    pages hold it): that hit seeds nothing. O(hits)."""
    keep: npt.NDArray[np.bool_]
    pages: Rows
    keep, pages = kernels.host_hits(
        np.ascontiguousarray(positions, dtype=np.int64),
        np.ascontiguousarray(rows, dtype=np.int64),
        np.ascontiguousarray(entry_hosts, dtype=np.uint32),
        np.ascontiguousarray(key_bounds, dtype=np.int64),
        np.array(hosts, dtype=np.uint32),
        np.array(excludes, dtype=np.int64),
        HOST_PAGES - 1,
    )
    return keep, pages


@dataclass(frozen=True, slots=True)
class HostPages:
    """What the stored pages of a document's host hold of its fingerprints: ``keys``
    (sorted) that some hold, ``pages[i]`` how many hold ``keys[i]``. A batch adds its
    earlier pages of the host to these counts (``chrome``)."""

    keys: npt.NDArray[np.uint64]
    pages: Rows

    @staticmethod
    def of(keys: npt.NDArray[np.uint64], pages: Rows) -> HostPages:
        """From the pages of the host holding each of ``keys`` (a document's
        fingerprints: sorted, each once)."""
        held = pages > 0
        return HostPages(keys[held], pages[held])

    def chrome(
        self, keys: npt.NDArray[np.uint64] | None = None, earlier: Rows | None = None
    ) -> npt.NDArray[np.uint64]:
        """The host's chrome among the document's fingerprints, sorted; with ``keys``
        (its fingerprints) and ``earlier[i]``, the earlier pages of a batch holding
        ``keys[i]``, counting those too. O(keys log)."""
        if keys is None or earlier is None:
            return self.keys[self.pages >= HOST_PAGES - 1]
        counts = np.asarray(earlier, dtype=np.int64)
        if len(self.keys):
            at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            counts = counts + np.where(self.keys[at] == keys, self.pages[at], 0)
        return np.sort(keys[counts >= HOST_PAGES - 1])


NO_PAGES = HostPages(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))


def without_chrome(
    passages: Sequence[Any],
    starts: npt.NDArray[np.int64],
    grams: npt.NDArray[np.uint64],
    keys: npt.NDArray[np.uint64],
    chrome: npt.NDArray[np.uint64],
    k: int,
) -> list[Any]:
    """The passages (each with code point ``start`` and ``tokens``) between two pages of
    one host that are not its chrome: a passage goes when it holds some of the query's
    ``chrome`` fingerprints and fewer than CONTENT_KEYS others (``keys``, both sorted,
    among its k-gram hashes ``grams``, from token ``starts``). A story next to the chrome
    in both pages stays whole: its own fingerprints are content. O(passage tokens +
    log)."""
    if not len(chrome) or not passages:
        return list(passages)
    kept = []
    for passage in passages:
        first = int(np.searchsorted(starts, passage.start))
        inside = grams[first : max(first, first + passage.tokens - k + 1)]
        held = inside[_member(inside, keys)]
        repeated = int(_member(held, chrome).sum())
        if not repeated or len(held) - repeated >= CONTENT_KEYS:
            kept.append(passage)
    return kept


def _member(
    values: npt.NDArray[np.uint64], sorted_set: npt.NDArray[np.uint64]
) -> npt.NDArray[np.bool_]:
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=np.bool_)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    found: npt.NDArray[np.bool_] = sorted_set[at] == values
    return found


def corpus_chrome(
    keys: Sequence[npt.NDArray[np.uint64]], hosts: Sequence[int]
) -> list[npt.NDArray[np.uint64]]:
    """Each document's fingerprints (``keys``, each once) that HOST_PAGES documents of its
    host (``hosts``; NO_HOST: none) hold in a whole corpus, sorted: what a batch job
    knows of a site's chrome at once. O(F log F) for F fingerprints."""
    counts = np.array([len(k) for k in keys], dtype=np.int64)
    none = np.zeros(0, dtype=np.uint64)
    if not counts.sum():
        return [none for _ in keys]
    flat = np.concatenate(keys)
    owners = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
    entry_hosts = np.repeat(np.asarray(hosts, dtype=np.int64), counts)
    order = np.lexsort((entry_hosts, flat))
    flat, owners, entry_hosts = flat[order], owners[order], entry_hosts[order]
    starts = np.flatnonzero(
        np.concatenate(([True], (flat[1:] != flat[:-1]) | (entry_hosts[1:] != entry_hosts[:-1])))
    )
    sizes = np.diff(np.append(starts, len(flat)))
    repeated = np.repeat(sizes >= HOST_PAGES, sizes) & (entry_hosts != NO_HOST)
    chrome_owners, chrome_keys_ = owners[repeated], flat[repeated]
    by_owner = np.lexsort((chrome_keys_, chrome_owners))
    chrome_owners, chrome_keys_ = chrome_owners[by_owner], chrome_keys_[by_owner]
    bounds = np.searchsorted(chrome_owners, np.arange(len(keys) + 1))
    return [chrome_keys_[bounds[i] : bounds[i + 1]] for i in range(len(keys))]
