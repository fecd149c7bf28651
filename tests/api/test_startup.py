"""Start-up: what clients hear while the indexes are rebuilt, and the kernel warm-up."""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

import app
from app.batch import _kernels as _batch_kernels
from app.cli import build_parser
from app.config import Settings
from app.core import (
    _candidate_kernels,
    _gram_kernels,
    _index_kernels,
    _kernels,
    _ngram_kernels,
    _passage_kernels,
    _run_kernels,
    _shared_kernels,
    _template_kernels,
)
from app.core.fingerprint import UNICODE_SIZE, char_classes
from app.core.text import is_no_space_script
from app.main import create_app
from app.storage.base import SavedRows, StoredCollection, no_saved_rows
from app.storage.memory import MemoryStore

READY_TIMEOUT_SECONDS = 60
DOCS = "/v1/collections/default/documents"


class _HeldStore(MemoryStore):
    """A store whose start-up load waits until the test lets it go."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        assert self.release.wait(READY_TIMEOUT_SECONDS), "the test never released the load"
        return super().load(saved_rows, texts=texts)


def test_a_503_while_rebuilding_says_when_to_retry(tmp_path: Path) -> None:
    release = threading.Event()
    app = create_app(Settings(data_dir=tmp_path), store_factory=lambda _: _HeldStore(release))
    with TestClient(app) as client:
        try:
            waiting = [
                client.get("/readyz"),
                client.get("/v1/collections"),
                client.get("/v1/collections/default"),
                client.post(DOCS, json={"id": "a", "text": "held back until the rebuild"}),
                client.get(f"{DOCS}/a"),
                client.post("/v1/collections/default/search", json={"text": "held back"}),
            ]
            assert client.get("/healthz").status_code == 200
        finally:
            release.set()
        for response in waiting:
            assert response.status_code == 503, response.request.url
            assert response.json()["error"]["code"] == "not_ready"
            retry_after = response.headers["Retry-After"]
            assert retry_after.isdigit() and 1 <= int(retry_after) <= 5
        assert app.state.ready.wait(READY_TIMEOUT_SECONDS), app.state.startup_error
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert "Retry-After" not in ready.headers
        inserted = client.post(DOCS, json={"id": "a", "text": "held back until the rebuild"})
        assert inserted.status_code == 201
        assert "Retry-After" not in inserted.headers


def test_other_errors_carry_no_retry_after(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    with TestClient(app) as client:
        assert app.state.ready.wait(READY_TIMEOUT_SECONDS), app.state.startup_error
        missing = client.get(f"{DOCS}/nothing-here")
        assert missing.status_code == 404
        assert "Retry-After" not in missing.headers


# The service's kernels and those of neardup dedup's local engine.
KERNEL_MODULES = (
    _kernels,
    _index_kernels,
    _gram_kernels,
    _ngram_kernels,
    _passage_kernels,
    _candidate_kernels,
    _run_kernels,
    _shared_kernels,
    _template_kernels,
    _batch_kernels,
)
# Kernels the service never calls: compared against in bench/, or called by tests only.
NOT_SERVICE_KERNELS = {
    "core._kernels.classic_minhash",
    "core._template_kernels.figure_counts",
}
_COMPILED_AFTER_WARM_UP = """
import json, sys
from app.batch import _kernels as _batch_kernels
from app.core import (
    _candidate_kernels, _gram_kernels, _index_kernels, _kernels, _ngram_kernels,
    _passage_kernels, _run_kernels, _shared_kernels, _template_kernels,
)
from app.warmup import compile_kernels
compile_kernels()
json.dump([
    f"{module.__name__.removeprefix('app.')}.{name}"
    for module in (
        _kernels, _index_kernels, _gram_kernels, _ngram_kernels, _passage_kernels,
        _candidate_kernels, _run_kernels, _shared_kernels, _template_kernels, _batch_kernels,
    )
    for name, kernel in vars(module).items()
    if getattr(kernel, "signatures", None)
], sys.stdout)
"""


def _kernels_called_by_modules() -> set[str]:
    """The kernels that app/'s Python modules (not the kernel modules) call: by a name
    imported from a kernel module, or as an attribute of one imported whole."""
    modules = {module.__name__: module.__name__.removeprefix("app.") for module in KERNEL_MODULES}
    called: set[str] = set()
    for path in Path(app.__file__).parent.rglob("*.py"):
        if "kernels" in path.name:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: dict[str, str] = {}  # local name -> kernel
        aliases: dict[str, str] = {}  # local name -> kernel module
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module in modules:
                    names[local] = f"{modules[node.module]}.{alias.name}"
                elif f"{node.module}.{alias.name}" in modules:
                    aliases[local] = modules[f"{node.module}.{alias.name}"]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            if isinstance(function, ast.Name) and function.id in names:
                called.add(names[function.id])
            elif (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Name)
                and function.value.id in aliases
            ):
                called.add(f"{aliases[function.value.id]}.{function.attr}")
    return called


def _kernels_called_from_python() -> set[str]:
    """Every kernel but those inlined or called only by other kernels (those are compiled
    and cached inside their callers, and not loaded on their own), and every inlined
    kernel that a Python module calls (the Redis store's n-gram bounds)."""
    kernels = {
        f"{module.__name__.removeprefix('app.')}.{name}": kernel
        for module in KERNEL_MODULES
        for name, kernel in vars(module).items()
        if getattr(kernel, "py_func", None) is not None
        and kernel.py_func.__module__ == module.__name__
    }
    bodies = {
        name: inspect.getsource(kernel.py_func).split(")", 1)[1] for name, kernel in kernels.items()
    }
    alone = {
        name
        for name, kernel in kernels.items()
        if kernel.targetoptions.get("inline") != "always"
        and not any(
            re.search(rf"\b{name.rsplit('.', 1)[1]}\(", body)
            for caller, body in bodies.items()
            if caller != name
        )
    }
    # An inlined kernel has no cache entry of its own from its callers: a Python call
    # compiles it (a kernel that is not inlined is cached when its caller is compiled).
    inlined = {n for n, kernel in kernels.items() if kernel.targetoptions.get("inline") == "always"}
    return alone | (_kernels_called_by_modules() & inlined)


def test_the_warm_up_reaches_every_kernel_of_the_service() -> None:
    """`neardup warm-up` (make, the Docker build) must compile every kernel, or the first
    start or request (or the first `neardup dedup`, some 20 s) compiles the rest. In a new
    process, so that no other test has compiled anything: after the warm-up, every kernel
    of the service and of dedup's local engine is loaded."""
    assert build_parser().parse_args(["warm-up"]).handler.__name__ == "warm_up"
    done = subprocess.run(
        [sys.executable, "-c", _COMPILED_AFTER_WARM_UP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    missed = _kernels_called_from_python() - set(json.loads(done.stdout)) - NOT_SERVICE_KERNELS
    assert not missed, f"kernels app/warmup.py does not reach: {sorted(missed)}"


def test_the_character_table_built_at_start_follows_its_definition() -> None:
    """char_classes is built with array operations to start fast; one code point at a
    time, by the definition: letters, marks and digits are word characters, those of
    scripts without spaces tokens of their own."""
    expected = np.zeros(UNICODE_SIZE, dtype=np.uint8)
    for code_point in range(UNICODE_SIZE):
        if unicodedata.category(chr(code_point))[0] in "LMN":
            single = is_no_space_script(code_point)
            expected[code_point] = (
                _kernels.CLASS_SINGLE_CHAR_TOKEN if single else _kernels.CLASS_WORD
            )
    assert np.array_equal(char_classes(), expected)
