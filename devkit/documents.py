"""Millions of distinct English texts, and near-duplicates of them, made on demand.

The material is Reuters-21578 (../shared/data, read through devkit/harness.py's load_reuters),
or synthetic English-like text when the data is absent. Every story is varied once, at
load time, with a quarter of its words replaced by words drawn from the corpus vocabulary
(as often as the corpus uses them), so neither the stories nor the corpus's own
near-duplicate pairs survive as they were; the varied stories are also cut into chunks of
at most 100 words.

``document(key, chars)`` is a pure function of ``key`` (any non-negative int) and the
corpus seed, so every process that loads the corpus makes the same text for the same key:
the preloader stores ``pre-{i}`` as ``document(i)`` and a load test can later send a
near-duplicate of it. With ``chars > 0`` (default 3000, "3 KB English") a document is
chunks chosen by a hash of the key, joined and cut at a word boundary at ``chars``
characters: 38,000 chunks, at least five to a 3 KB document, so two documents share all
their chunks with negligible probability; they are distinct texts and, sharing a chunk
or two at most, not near-duplicates (estimated Jaccard below 0.3). With ``chars == 0`` a
document is one varied story at its natural length (median 546 bytes for Reuters) with a
further 30% of its words replaced under the key's own seed.

``near_duplicate(text, rng)`` changes one random word: the estimated Jaccard similarity of
the character 5-gram sets stays above 0.95 for a 3 KB text.

A 3 KB document costs about 10 µs to make and a near-duplicate as much, so a load
generator spends its CPU on HTTP, not on text. Loading takes about 2 s.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from devkit.harness import load_reuters, reuters_text

SEGMENT_SUBSTITUTION = 0.25  # words of each story replaced once, at load time
NATURAL_SUBSTITUTION = 0.30  # further words replaced per document when chars == 0
DEFAULT_CHARS = 3000  # "3 KB English"
SEGMENT_WORDS = 100  # longest chunk of a story that a composed document is made of
MASK64 = (1 << 64) - 1


def _mix64(value: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit hash of an int."""
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


# Synthetic fallback: common English words plus pseudo-words from English-like syllables.
_COMMON = (
    "the of and to a in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will more can said who its about than into them only two some could new first "
    "also after over most other time years market prices company bank government shares "
    "trade oil rate rates year percent billion million sales profit quarter exports tonnes "
    "minister officials dollar yen analysts week month agreement output growth"
).split()
_ONSETS = ("b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr")
_NUCLEI = ("a", "e", "i", "o", "u", "ea", "ou", "ai")
_CODAS = ("", "n", "r", "s", "t", "l", "nd", "st", "ng")


def synthetic_stories(count: int = 20_000, seed: int = 0) -> list[str]:
    """English-looking stories: sentences of common words and pronounceable pseudo-words."""
    rng = random.Random(seed)
    pseudo = sorted(
        {
            "".join(rng.choice(part) for _ in range(syllables) for part in (_ONSETS, _NUCLEI))
            + rng.choice(_CODAS)
            for syllables in (1, 2, 3)
            for _ in range(4000)
        }
    )
    vocabulary = list(_COMMON) * 20 + pseudo  # common words about half of the running text
    stories = []
    for _ in range(count):
        sentences = []
        for _ in range(rng.randint(3, 12)):
            words = rng.choices(vocabulary, k=rng.randint(8, 24))
            sentences.append(" ".join(words).capitalize() + ".")
        stories.append(" ".join(sentences))
    return stories


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Distinct words and cumulative counts, to draw words as often as the corpus uses them."""

    words: list[str]
    cumulative: list[int]

    @staticmethod
    def of(texts: list[list[str]]) -> Vocabulary:
        counts = Counter(itertools.chain.from_iterable(texts))
        words = sorted(counts)
        return Vocabulary(words, list(itertools.accumulate(counts[word] for word in words)))

    def draw(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cumulative, k=k)

    def draw_one(self, rng: random.Random) -> str:
        position = rng.random() * self.cumulative[-1]
        return self.words[bisect.bisect(self.cumulative, position)]


class Corpus:
    """Varied stories, the chunks of them that documents are made of, and the vocabulary."""

    def __init__(self, stories: list[str], source: str, seed: int = 0) -> None:
        tokenised = [story.split() for story in stories if story.strip()]
        self.source = source
        self.seed = seed
        self.vocabulary = Vocabulary.of(tokenised)
        # Vary every story once, vectorised: 2.7 million Reuters words take about 0.5 s.
        flat = list(itertools.chain.from_iterable(tokenised))
        ends = list(itertools.accumulate(map(len, tokenised)))
        generator = np.random.default_rng(seed)
        chosen = np.flatnonzero(generator.random(len(flat)) < SEGMENT_SUBSTITUTION)
        cumulative = np.asarray(self.vocabulary.cumulative, dtype=np.float64)
        drawn = np.searchsorted(
            cumulative, generator.random(len(chosen)) * cumulative[-1], side="right"
        )
        words = self.vocabulary.words
        for position, index in zip(chosen.tolist(), drawn.tolist(), strict=True):
            flat[position] = words[index]
        self.stories: list[str] = []
        self.segments: list[str] = []
        for start, end in zip([0, *ends[:-1]], ends, strict=True):
            self.stories.append(" ".join(flat[start:end]))
            # Chunks of at most SEGMENT_WORDS words: a 3 KB document always has several.
            for chunk in range(start, end, SEGMENT_WORDS):
                self.segments.append(" ".join(flat[chunk : min(chunk + SEGMENT_WORDS, end)]))

    def __len__(self) -> int:
        return len(self.stories)

    def document(self, key: int, chars: int = DEFAULT_CHARS) -> str:
        """The text of document ``key``: about ``chars`` characters (0: natural length)."""
        state = _mix64((key * 0x9E3779B97F4A7C15 + self.seed) & MASK64)
        if chars <= 0:
            return self._natural(key, self.stories[state % len(self.stories)])
        count = len(self.segments)
        parts: list[str] = []
        length = 0
        while length < chars:
            state = _mix64(state)
            segment = self.segments[state % count]
            parts.append(segment)
            length += len(segment) + 1
        text = " ".join(parts)
        cut = text.rfind(" ", 0, chars + 1)
        return text[: cut if cut > chars // 2 else chars]

    def _natural(self, key: int, story: str) -> str:
        rng = random.Random(key ^ (self.seed << 40))
        words = story.split(" ")
        replaced = round(len(words) * NATURAL_SUBSTITUTION)
        for position, word in zip(
            rng.sample(range(len(words)), replaced),
            self.vocabulary.draw(rng, replaced),
            strict=True,
        ):
            words[position] = word
        return " ".join(words)

    def near_duplicate(self, text: str, rng: random.Random) -> str:
        """The text with one random word replaced by another word of the vocabulary."""
        middle = rng.randrange(len(text))
        start = text.rfind(" ", 0, middle) + 1
        end = text.find(" ", middle)
        end = len(text) if end < 0 else end
        original = text[start:end]
        replacement = original + "x"
        for _ in range(8):
            word = self.vocabulary.draw_one(rng)
            if word != original:
                replacement = word
                break
        return text[:start] + replacement + text[end:]


@lru_cache(maxsize=2)
def load_corpus(seed: int = 0) -> Corpus:
    """The Reuters corpus if ../shared/data has it, else synthetic text (same seed, same text)."""
    stories = load_reuters()
    if stories is not None:
        return Corpus([reuters_text(story) for story in stories], "reuters21578", seed)
    return Corpus(synthetic_stories(seed=seed), "synthetic", seed)
