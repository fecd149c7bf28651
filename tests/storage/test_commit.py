"""app/storage/commit.py: a change's commit waited for by threads and coroutines."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.storage.commit import Commit, settle, settled


def test_threads_wait_until_settled_and_see_the_outcome() -> None:
    good, bad = Commit(), Commit()
    seen: list[object] = []
    started = threading.Barrier(3)

    def wait(commit: Commit) -> None:
        started.wait()
        seen.append(commit.exception(timeout=30))

    waiters = [threading.Thread(target=wait, args=(c,)) for c in (good, bad)]
    for waiter in waiters:
        waiter.start()
    started.wait()
    assert not good.done() and not bad.done()
    error = ValueError("refused")
    settle([(good, None), (bad, error)])
    for waiter in waiters:
        waiter.join(30)
    assert sorted(seen, key=repr) == sorted([None, error], key=repr)
    good.result()
    with pytest.raises(ValueError, match="refused"):
        bad.result()
    for commit in (good, bad):
        commit._check()


def test_a_timeout_and_a_second_settle_are_refused() -> None:
    commit = Commit()
    with pytest.raises(TimeoutError):
        commit.result(timeout=0.01)
    settle([(commit, None)])
    with pytest.raises(RuntimeError):
        settle([(commit, ValueError("late"))])
    assert commit.exception() is None


def test_coroutines_of_one_group_are_woken_by_one_call_into_their_loop() -> None:
    calls = 0

    async def main() -> list[BaseException | None]:
        nonlocal calls
        loop = asyncio.get_running_loop()
        original = loop.call_soon_threadsafe

        def counting(*args: object, **kwargs: object) -> asyncio.Handle:
            nonlocal calls
            calls += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        commits = [Commit() for _ in range(5)]
        waits = [asyncio.ensure_future(c.wait()) for c in commits]
        cancelled = asyncio.ensure_future(commits[0].wait())
        await asyncio.sleep(0)  # every waiter registered
        cancelled.cancel()
        error = OSError("disk full")
        writer = threading.Thread(
            target=settle, args=([(c, error if i == 3 else None) for i, c in enumerate(commits)],)
        )
        writer.start()
        results = await asyncio.gather(*waits)
        writer.join()
        assert cancelled.cancelled()
        for commit in commits:
            commit._check()
        return results

    results = asyncio.run(main())
    assert calls == 1
    assert [r is None for r in results] == [True, True, True, False, True]


def test_a_settled_commit_answers_at_once() -> None:
    async def main() -> BaseException | None:
        return await settled(KeyError("x")).wait()

    assert isinstance(asyncio.run(main()), KeyError)
    assert settled().done() and settled().exception() is None
