"""numba's cache saves under one lock a directory (app/core/kernel_cache.py)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import textwrap
import types
from pathlib import Path

from app.core.kernel_cache import LOCK_FILE, _locked, serialize_saves


def _lock_state(path: Path) -> str:
    """Whether another open file can take the directory's lock now."""
    with open(path / LOCK_FILE, "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held"
        fcntl.flock(other, fcntl.LOCK_UN)
        return "free"


def test_a_save_runs_holding_the_lock_and_lets_go_after(tmp_path: Path) -> None:
    seen: list[tuple[str, object, object]] = []

    def numba_save(self: object, key: object, data: object) -> None:
        seen.append((_lock_state(tmp_path), key, data))

    cache_file = types.SimpleNamespace(_cache_path=str(tmp_path))
    _locked(numba_save)(cache_file, "signature", b"code")
    assert seen == [("held", "signature", b"code")]
    assert _lock_state(tmp_path) == "free"


def test_a_save_where_no_lock_can_be_made_is_numbas_own(tmp_path: Path) -> None:
    saved: list[object] = []
    missing = types.SimpleNamespace(_cache_path=str(tmp_path / "not-there"))
    _locked(lambda self, key, data: saved.append(key))(missing, "signature", b"code")
    assert saved == ["signature"]


def test_numbas_cache_is_serialized_once_app_core_is_imported() -> None:
    from numba.core.caching import IndexDataCacheFile

    assert serialize_saves()
    wrapped = IndexDataCacheFile.save
    assert getattr(wrapped, "serialized", False)
    assert serialize_saves() and IndexDataCacheFile.save is wrapped  # not wrapped twice


def test_two_processes_save_signatures_of_one_kernel_into_one_cache(tmp_path: Path) -> None:
    """Each process compiles the same cached kernel for a type of its own, at once; the
    index must then hold both, each pointing at its own code: a third process loads
    both and gets each one's answer."""
    module = tmp_path / "kernel_module.py"
    module.write_text(
        textwrap.dedent(
            """
            import app.core  # the lock
            from numba import njit

            @njit(cache=True)
            def double(x):
                return x + x
            """
        )
    )
    run = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from kernel_module import double
        value = {"int": 21, "float": 1.25, "complex": 1j}[sys.argv[2]]
        print(double(value))
        """
    )
    env_dir = str(tmp_path)
    started = [
        subprocess.Popen([sys.executable, "-c", run, env_dir, kind], stdout=subprocess.PIPE)
        for kind in ("int", "float", "complex")
    ]
    outputs = [process.communicate(timeout=300)[0].decode().strip() for process in started]
    assert [process.returncode for process in started] == [0, 0, 0]
    assert outputs == ["42", "2.5", "2j"]
    check = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from kernel_module import double
        print(double(21), double(1.25), double(1j), len(double.stats.cache_hits))
        """
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check, env_dir], capture_output=True, check=True, timeout=300
    )
    assert loaded.stdout.decode().split() == ["42", "2.5", "2j", "3"]
