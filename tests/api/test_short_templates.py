"""Templated short texts (issue 28): two reports of one template that state other
figures are not near-duplicates; a re-issue that spells a figure out, corrects a word or
reorders a line still is. Through the HTTP API, on the embedded service and over Redis.

Each family is labelled by hand. Every refused pair is first shown to be within the
n-gram threshold by a plain q-gram Jaccard over Python sets (so the refusal is the
template rule's, not the threshold's), and a collection with ``same_numbers`` off
matches it (so the test can fail)."""

from __future__ import annotations

import contextlib
import itertools
import random
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.collection_config import NgramConfig
from app.core import _gram_kernels as gram_kernels
from app.core import _ngram_kernels as ngram_kernels
from app.core._template_kernels import (
    CHINESE_DIGIT,
    CHINESE_UNIT,
    NOTHING,
    figure_counts,
    figure_kind,
)
from app.core.fingerprint import code_points_of
from app.core.ngram import code_points
from app.core.template import (
    CHINESE_DIGITS,
    CHINESE_UNITS,
    NO_FIGURES,
    NUMBER_WORDS,
    chinese_value,
    differing_numbers,
    figures,
    figures_key,
    figures_keys,
    numbers,
    within_one_edit,
)
from app.core.text import normalize
from tests.conftest import LIMITS, make_client
from tests.redis_servers import RedisServer, emptied

CHINESE_NUMERALS = set(CHINESE_DIGITS) | set(CHINESE_UNITS)
# (first report, other reports of the template with other figures, re-issues of the first)
FAMILIES: list[tuple[str, list[str], list[str]]] = [
    (
        "LME NICKEL 1ST RING 1222 - APR 7 - Cash nil, three months 2345 dlrs per tonne",
        [
            "LME NICKEL 1ST RING 1627 - APR 7 - Cash nil, three months 2345 dlrs per tonne",
            "LME NICKEL 2ND RING 1222 - APR 7 - Cash nil, three months 2345 dlrs per tonne",
        ],
        ["LME NICKEL FIRST RING 1,222 - APR 7 - Cash nil, three months 2345 dlrs per tonne"],
    ),
    (
        "NYSE COMPOSITE INDEX AT 1530 EST STANDS AT 205.81, OFF 1.67 ON THE DAY",
        [
            "NYSE COMPOSITE INDEX AT 1530 EST STANDS AT 205.79, OFF 1.69 ON THE DAY",
            "NYSE COMPOSITE INDEX AT 1600 EST STANDS AT 205.81, OFF 1.67 ON THE DAY",
        ],
        ["NYSE COMPOSITE INDEX AT 1530 EST STANDS AT 205.810, OFF 1.67 ON THE DAY"],
    ),
    (
        "FED SETS SIX-DAY SYSTEM REPURCHASES, A SPOKESMAN FOR THE NEW YORK FED SAID",
        ["FED SETS TWO-DAY SYSTEM REPURCHASES, A SPOKESMAN FOR THE NEW YORK FED SAID"],
        [
            "FED SETS 6-DAY SYSTEM REPURCHASES, A SPOKESMAN FOR THE NEW YORK FED SAID",
            "FED SETS SIX-DAY SYSTEM REPURCHASE, A SPOKESMAN FOR THE NEW YORK FED SAID",
        ],
    ),
    (
        "Qtly div 30 cts vs 30 cts prior Pay April 30 Record April 3",
        ["Qtly div 42 cts vs 30 cts prior Pay April 30 Record April 3"],
        [
            "Qtly div 30 cts vs 30 cts prior Pay April 30 Record April Three",
            "Qtly div 30 cts vs 30 cts prior Record April 3 Pay April 30",
        ],
    ),
    (
        "Football: Arsenal 2 Chelsea 1, full time at Highbury, attendance 38,000",
        ["Football: Arsenal 3 Chelsea 0, full time at Highbury, attendance 38,000"],
        ["Football: Arsenal two Chelsea 1, full-time at Highbury, attendance 38,000"],
    ),
    (
        "London weather: sunny spells, high of 21C, low of 12C, wind 15 km/h from west",
        ["London weather: sunny spells, high of 19C, low of 12C, wind 15 km/h from west"],
        ["London weather: sunny spells, high of 21C, low of 12C, wind of 15 km/h from west"],
    ),
    (
        "上海证券交易所综合指数今日收盘报3250.12点，上涨12.5点，成交额二千亿元",
        ["上海证券交易所综合指数今日收盘报3262.62点，上涨12.5点，成交额二千亿元"],
        ["上海证券交易所综合指数今天收盘报3250.12点，上涨12.5点，成交额二千亿元"],
    ),
    (
        "美联储今日宣布进行六天期系统回购协议，纽约联储发言人表示",
        ["美联储今日宣布进行十四天期系统回购协议，纽约联储发言人表示"],
        ["美联储今日宣布进行6天期系统回购协议，纽约联储发言人表示"],
    ),
    (
        "北京今天晴转多云，最高气温二十三度，最低气温十二度，北风三级",
        ["北京今天晴转多云，最高气温三十一度，最低气温十二度，北风三级"],
        ["北京今天晴转多云，最高气温23度，最低气温十二度，北风三级"],
    ),
]


def _qgram_jaccard(first: str, second: str, config: NgramConfig) -> float:
    """Character q-grams of the normalised texts, q = cjk_size at a Han character."""

    def grams(text: str) -> set[str]:
        text = normalize(text)
        found = set()
        for at, character in enumerate(text):
            q = config.cjk_size if "\u4e00" <= character <= "\u9fff" else config.size
            if q is not None and at + q <= len(text):
                found.add(text[at : at + q])
        return found or {text}

    a, b = grams(first), grams(second)
    return len(a & b) / len(a | b)


def test_numbers_are_read_as_values() -> None:
    assert numbers("LME NICKEL 1ST RING 1,222 - APR 7 Cash --") == {"1": 1, "1222": 1, "7": 1}
    assert numbers("205.810 off 1.0 and 0.5") == {"205.81": 1, "1": 1, "0.5": 1}
    assert numbers("Record April Three, thirty and 3rd") == {"3": 2, "30": 1}
    assert numbers("q3 results, 21C and 15km/h") == {"3": 1, "21": 1, "15": 1}  # glued units
    assert numbers("指数收盘报3250.12点") == {"3250.12": 1}  # digits inside Chinese text
    assert numbers("六天期回购 两百零五 二〇二四年") == {"6": 1, "205": 1, "2024": 1}
    assert [chinese_value(run) for run in ("十二", "二十三", "三万五千", "十")] == [
        12,
        23,
        35000,
        10,
    ]
    assert differing_numbers("fed sets six-day", "fed sets two-day") == "numbers differ: 6 / 2"
    assert (
        differing_numbers("ring 1222 cash 2345", "ring 1627 cash --")
        == "numbers differ: 1222 / 1627"
    )
    assert differing_numbers("quake hits tokyo", "quake hits tokyo, 5 dead") is None  # added
    assert differing_numbers("lme ring 1222 - apr 7", "lme ring 1222 - apr 8") is None  # a typo
    assert (
        differing_numbers("pay april 30 record april 3", "record april three pay april 30") is None
    )


def _refused_and_kept(client: TestClient, collection: str) -> tuple[list[str], list[str]]:
    """Each family's first report inserted, then every other text searched: (texts that
    found it, texts that did not). An explained search names the refused ones, with the
    numbers that differ (``differing_numbers``, checked by hand above)."""
    found, missed = [], []
    for number, (first, _, _) in enumerate(FAMILIES):
        response = client.post(
            f"/v1/collections/{collection}/documents", json={"id": f"f{number}", "text": first}
        )
        assert response.status_code == 201, response.text
    for number, (_, others, reissues) in enumerate(FAMILIES):
        for text in others + reissues:
            answer = client.post(f"/v1/collections/{collection}/search", json={"text": text})
            assert answer.status_code == 200, answer.text
            # Near-duplicate matches: a shared passage alone is a relation, not one.
            matches = answer.json()["matches"]
            ids = [match["id"] for match in matches if set(match["methods"]) - {"passage"}]
            (found if f"f{number}" in ids else missed).append(text)
            explained = client.post(
                f"/v1/collections/{collection}/search", json={"text": text, "explain": True}
            ).json()
            assert explained["matches"] == matches and "refused" not in answer.json()
            refused = {r["id"]: r for r in explained["refused"]}
            if f"f{number}" in ids or collection == "norule":
                assert f"f{number}" not in refused
                continue
            reason = differing_numbers(normalize(text), normalize(FAMILIES[number][0]))
            assert refused[f"f{number}"]["methods"] == ["ngram"]
            assert refused[f"f{number}"]["reason"] == reason
            assert refused[f"f{number}"]["similarity"] >= NgramConfig().threshold
    return found, missed


def _families_answer(client: TestClient) -> None:
    config = NgramConfig()
    for first, others, reissues in FAMILIES:
        for text in others + reissues:  # all within the threshold: the rule decides
            assert _qgram_jaccard(first, text, config) >= config.threshold, (first, text)
    for name, settings in (("rule", {}), ("norule", {"ngram": {"same_numbers": False}})):
        assert client.put(f"/v1/collections/{name}", json=settings).status_code == 201
    found, missed = _refused_and_kept(client, "rule")
    assert sorted(missed) == sorted(text for _, others, _ in FAMILIES for text in others)
    assert sorted(found) == sorted(text for _, _, reissues in FAMILIES for text in reissues)
    found_without, _ = _refused_and_kept(client, "norule")
    assert set(found_without) >= set(missed)  # without the rule the reports match


def test_reports_of_one_template_are_not_duplicates(tmp_path: Path) -> None:
    with contextlib.contextmanager(make_client)(tmp_path) as client:
        _families_answer(client)
        # The reason shown for the first family, by hand; and through GET.
        answer = client.get(
            "/v1/collections/rule/search",
            params={"text": FAMILIES[0][1][0], "explain": "true"},
        ).json()
        assert [(r["id"], r["reason"]) for r in answer["refused"]] == [
            ("f0", "numbers differ: 1627 / 1222")
        ]
        # Similar by id explains the same, the other report stored.
        documents = "/v1/collections/rule/documents"
        stored = client.post(documents, json={"id": "other", "text": FAMILIES[0][1][0]})

        def near(matches: list[dict[str, object]]) -> list[object]:
            # A shared passage is a relation the rule leaves: reported among the matches.
            return [m["id"] for m in matches if m["methods"] != ["passage"]]

        assert stored.status_code == 201 and near(stored.json()["matches"]) == []
        similar = client.get(f"{documents}/other/similar", params={"explain": "true"}).json()
        assert near(similar["matches"]) == []
        assert [(r["id"], r["reason"]) for r in similar["refused"]] == [
            ("f0", "numbers differ: 1627 / 1222")
        ]
        plain = client.get(f"{documents}/other/similar").json()
        assert "refused" not in plain


def test_reports_of_one_template_are_not_duplicates_over_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    emptied(redis_server.url)
    served = contextlib.contextmanager(make_client)
    with served(tmp_path, backend=redis_server.url, **LIMITS) as client:
        _families_answer(client)


@pytest.mark.xfail(strict=True, reason="numbers are compared as a multiset: a swapped score")
def test_a_swapped_score_is_not_a_duplicate(tmp_path: Path) -> None:
    """A known gap of the number rule: the same numbers in another order ("2-1" and
    "1-2") are the same multiset; a reordered re-issue is too, so order alone cannot
    decide."""
    first = "Football: Arsenal 2 Chelsea 1, full time at Highbury, attendance 38,000"
    swapped = "Football: Arsenal 1 Chelsea 2, full time at Highbury, attendance 38,000"
    with contextlib.contextmanager(make_client)(tmp_path) as client:
        assert client.put("/v1/collections/c", json={}).status_code == 201
        client.post("/v1/collections/c/documents", json={"id": "a", "text": first})
        matches = client.post("/v1/collections/c/search", json={"text": swapped}).json()
        assert not [m for m in matches["matches"] if set(m["methods"]) - {"passage"}]


def _edit_distance(first: str, second: str) -> int:
    """Optimal string alignment distance by dynamic programming (adjacent swaps count one)."""
    rows = [[0] * (len(second) + 1) for _ in range(len(first) + 1)]
    for i in range(len(first) + 1):
        for j in range(len(second) + 1):
            if min(i, j) == 0:
                rows[i][j] = max(i, j)
                continue
            cost = first[i - 1] != second[j - 1]
            rows[i][j] = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and first[i - 1] == second[j - 2] and first[i - 2] == second[j - 1]:
                rows[i][j] = min(rows[i][j], rows[i - 2][j - 2] + 1)
    return rows[-1][-1]


def test_within_one_edit_agrees_with_the_edit_distance() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        first = "".join(rng.choice("ab1") for _ in range(rng.randrange(0, 7)))
        second = list(first)
        for _ in range(rng.randrange(0, 3)):  # a few random edits, often none or one
            kind = rng.randrange(3)
            at = rng.randrange(len(second) + 1)
            if kind == 0:
                second.insert(at, rng.choice("ab1"))
            elif second and at < len(second):
                if kind == 1:
                    del second[at]
                else:
                    second[at] = rng.choice("ab1")
        edited = "".join(second)
        assert within_one_edit(first, edited) == (_edit_distance(first, edited) <= 1)
    assert within_one_edit("housing", "hosuing") and not within_one_edit("1st", "2nd")


def _plain_figures(text: str) -> Counter[str]:
    """The digits of the numbers of a text, counted character by character: a digit of
    any script by its value, a whole run of ASCII letters that is a number word, a run of
    Chinese numerals by its value (``chinese_value``, checked above)."""
    found: Counter[str] = Counter()
    for is_word, group in itertools.groupby(text, lambda c: c.isascii() and c.isalpha()):
        run = "".join(group)
        if is_word:
            found.update(NUMBER_WORDS.get(run.lower(), ""))
            continue
        for is_numeral, characters in itertools.groupby(run, lambda c: c in CHINESE_NUMERALS):
            part = "".join(characters)
            if is_numeral:
                found.update(str(chinese_value(part)))
            else:
                found.update(str(unicodedata.decimal(c)) for c in part if c.isdecimal())
    return found


def test_the_compiled_figures_keys_agree_with_a_plain_count() -> None:
    pieces = ["three", "Three", "THIRTEEN", "xthree", "seventeen", "seventeens", "1,222", "10.5"]
    pieces += ["٣", "٤٥", "二十三", "两百零五", "三万五千", "二〇二四", "〇〇", "十", "万", "first"]
    pieces += ["tenth", "ſix", " ", "-", "abc", "é", "threé", "中", "3rd", "007", "zero", "１２"]
    rng = random.Random(5)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(13))) for _ in range(3000)]
    points, offsets = code_points(texts)
    counts = figure_counts(points, offsets)
    keys = figures_keys(points, offsets).tolist()
    key_of: dict[str, int] = {}
    for text, row, key in zip(texts, counts.tolist(), keys, strict=True):
        plain = _plain_figures(text)
        assert {str(d): n for d, n in enumerate(row) if n} == dict(plain), text
        assert Counter(figures(text)) == plain, text
        assert (key == NO_FIGURES) == (not plain) and key != 0
        digits = "".join(sorted(plain.elements()))
        assert key_of.setdefault(digits, key) == key, text  # one key per figures
        assert figures_key(text) == key
    assert len(set(key_of.values())) == len(key_of)  # and other figures, other keys


def test_every_code_point_is_classed_as_unicodedata_says() -> None:
    """The kernels' digit of every code point (its value for a decimal digit of any
    script, as ``\\d`` matches them) and the Chinese numerals, against unicodedata."""
    kinds = np.fromiter((figure_kind(p) for p in range(0x110000)), np.int64, 0x110000)
    numerals = {ord(c): CHINESE_DIGIT + v for c, v in CHINESE_DIGITS.items()}
    numerals.update({ord(c): CHINESE_UNIT + len(str(u)) - 1 for c, u in CHINESE_UNITS.items()})
    expected = np.fromiter(
        (numerals.get(p, unicodedata.decimal(chr(p), NOTHING)) for p in range(0x110000)),
        np.int64,
        0x110000,
    )
    assert np.array_equal(kinds, expected)


def test_the_compiled_one_edit_check_agrees_with_the_plain_one() -> None:
    """The search kernel's typo check (``within_one_edit`` of app/core/_ngram_kernels.py)
    against ``template.within_one_edit`` (checked against a DP above), on stored texts of
    one, two and four bytes a character."""
    rng = random.Random(4)
    for alphabet in ("ab1", "aé1", "a中1", "a😀1"):
        pairs = []
        for _ in range(500):
            first = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 7)))
            second = list(first)
            for _ in range(rng.randrange(0, 3)):
                at = rng.randrange(len(second) + 1)
                if rng.random() < 0.4:
                    second.insert(at, rng.choice(alphabet))
                elif at < len(second):
                    second[at] = rng.choice(alphabet)
            pairs.append((first, "".join(second)))
        points, offsets = code_points([stored for _, stored in pairs])
        data, starts, chars, widths, _ = gram_kernels.pack_texts(points, offsets, False)
        for at, (query, stored) in enumerate(pairs):
            # The types the search kernel passes (writable code points, int64s): other
            # types would be compiled anew for the test alone.
            asked = code_points_of(query)
            compiled = ngram_kernels.within_one_edit(
                (asked, 0, len(asked)), (data, int(starts[at]), int(widths[at]), int(chars[at]))
            )
            assert compiled == within_one_edit(query, stored), (query, stored)
