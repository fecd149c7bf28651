"""wrk, the C load generator: running it, reading its figures, and the Lua scripts of the
benchmarks' two workloads (search by a 3 KB text; single inserts of distinct texts).

Needs ``wrk`` on the PATH (``apt-get install wrk``).
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devkit.documents import Corpus

COLLECTION = "/v1/collections/default"
SEARCH_PATH = f"{COLLECTION}/search"
INSERT_PATH = f"{COLLECTION}/documents"
BODIES = 512  # search bodies a script cycles through
TEXT_CHARS = 3000  # of an inserted text
PHRASES, PHRASE_WORDS = 50_000, 8  # the list the insert script draws from


@dataclass
class WrkRun:
    """One wrk run: requests/s, latency percentiles (wrk's own histogram), failed requests."""

    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int = 0  # answered in the run (0 in a median of runs)


def parse_wrk(output: str) -> WrkRun:
    """The figures of ``wrk --latency`` output; errors are non-2xx/3xx answers and socket
    errors (connect, read, write, timeout)."""

    def duration_ms(text: str) -> float:
        value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = duration_ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = duration_ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    socket_errors = re.search(r"Socket errors: (.*)", output)
    if socket_errors:
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(1)))
    answered = re.search(r"(\d+) requests in", output)
    return WrkRun(rate, p50, p99, errors, int(answered.group(1)) if answered else 0)


def run_wrk(
    url: str,
    *,
    clients: int,
    duration: float,
    script: Path | None = None,
    script_args: Sequence[str] = (),
    cpu: int | None = None,
    threads: int = 2,
) -> WrkRun:
    """``wrk -t<threads>`` with ``clients`` connections for ``duration`` seconds, on CPU
    ``cpu`` (taskset) or anywhere (None); ``script_args`` reach the Lua script's
    ``init(args)``."""
    command = ["wrk", f"-t{threads}", f"-c{clients}", f"-d{duration}s", "--latency"]
    if script is not None:
        command += ["-s", str(script)]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    command.append(url)
    if script_args:
        command += ["--", *script_args]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return parse_wrk(output)


def median_run(runs: Sequence[WrkRun]) -> WrkRun:
    """Medians of each figure over runs (each taken separately) and the errors of all."""
    return WrkRun(
        statistics.median(r.requests_per_second for r in runs),
        statistics.median(r.p50_ms for r in runs),
        statistics.median(r.p99_ms for r in runs),
        sum(r.errors for r in runs),
    )


# wrk Lua: each connection cycles through the bodies from its own offset.
SEARCH_LUA = """
local bodies = {}
for line in io.lines("%s") do bodies[#bodies + 1] = line end
local counter = 0
request = function()
  counter = counter + 1
  local body = bodies[(counter %% #bodies) + 1]
  return wrk.format("POST", "%s", {["Content-Type"] = "application/json"}, body)
end
"""


def write_search_script(root: Path, size: int, corpus: Corpus, rng: random.Random) -> Path:
    """The wrk script of searches and its request bodies for an index of ``size``
    documents ``pre-{i}``: 512 3 KB texts, a fifth near-duplicates of stored documents."""
    bodies = root / f"bodies-{size}.jsonl"
    with bodies.open("w") as out:
        for _ in range(BODIES):
            if rng.random() < 0.2:  # a near-duplicate of a stored document
                text = corpus.near_duplicate(corpus.document(rng.randrange(size)), rng)
            else:  # most searches: a new text, found nowhere
                text = corpus.document(size + rng.randrange(10**9))
            out.write(json.dumps({"text": text}) + "\n")
    script = root / f"search-{size}.lua"
    script.write_text(SEARCH_LUA % (bodies, SEARCH_PATH))
    return script


def search_texts(script: Path) -> list[str]:
    """The request bodies' texts of a write_search_script script (its bodies file)."""
    bodies = script.with_name(script.name.replace("search-", "bodies-").replace(".lua", ".jsonl"))
    return [json.loads(line)["text"] for line in bodies.read_text().splitlines()]


# wrk Lua: a distinct ~3 KB text per request. A prefix unique to the run, thread and
# request, then phrases of random words drawn at random from a list (seeded per run and
# thread): two texts share a phrase or two at most, a few of their ~500 word 5-grams.
# (Phrases, not words: wrk spends ~60 µs of CPU on a request instead of ~120.) The run is
# the script's first argument (run_wrk's script_args).
INSERT_LUA = """
local phrases = {}
for line in io.lines("%(phrases)s") do phrases[#phrases + 1] = line end
local count = #phrases
local headers = {["Content-Type"] = "application/json"}
local prefix, sent, threads = "", 0, 0

function setup(thread)
  threads = threads + 1
  thread:set("number", threads)
end

function init(args)
  local run = tonumber(args[1]) or 0
  prefix = "wrk run " .. run .. " thread " .. number .. " request "
  math.randomseed(run * 1000 + number)
end

function request()
  sent = sent + 1
  local parts = {prefix .. sent}
  local length = #parts[1]
  while length < %(chars)d do
    local phrase = phrases[math.random(count)]
    parts[#parts + 1] = phrase
    length = length + 1 + #phrase
  end
  local body = '{"text":"' .. table.concat(parts, " ") .. '"}'
  return wrk.format("POST", "%(path)s", headers, body)
end
"""


def write_insert_script(root: Path, corpus: Corpus, rng: random.Random) -> Path:
    """The Lua script of single inserts and its phrases: words drawn as often as the
    corpus uses them, those safe in a JSON string as they are."""
    words = [
        word
        for word in corpus.vocabulary.draw(rng, PHRASES * PHRASE_WORDS * 2)
        if word.isascii() and word.isprintable() and '"' not in word and "\\" not in word
    ]
    phrases = root / "phrases.txt"
    with phrases.open("w") as out:
        for start in range(0, PHRASES * PHRASE_WORDS, PHRASE_WORDS):
            out.write(" ".join(words[start : start + PHRASE_WORDS]) + "\n")
    script = root / "insert.lua"
    script.write_text(INSERT_LUA % {"phrases": phrases, "chars": TEXT_CHARS, "path": INSERT_PATH})
    return script
