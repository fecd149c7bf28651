"""The methods a match names and their bits: what every backend, the answers and
``neardup dedup`` mark a pair with (app/core/rule.py: the match rule)."""

from __future__ import annotations

from typing import Literal

Method = Literal["exact", "simhash", "minhash", "ngram", "passage"]
METHOD_ORDER: tuple[Method, ...] = ("exact", "simhash", "minhash", "ngram", "passage")
# "passage" is not a near-duplicate method: a shared passage is a relation between two
# documents (app/service/passages.py), named among a match's methods when there is one.
EXACT, SIMHASH, MINHASH, NGRAM, PASSAGE = 1, 2, 4, 8, 16
METHOD_BITS = (EXACT, SIMHASH, MINHASH, NGRAM, PASSAGE)
BIT_OF_METHOD: dict[Method, int] = dict(zip(METHOD_ORDER, METHOD_BITS, strict=True))
# Method bits -> the methods named in a Match, in the contract's order.
METHODS_OF_BITS: tuple[tuple[Method, ...], ...] = tuple(
    tuple(method for bit, method in zip(METHOD_BITS, METHOD_ORDER, strict=True) if bits & bit)
    for bits in range(32)
)
