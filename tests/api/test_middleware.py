"""The middlewares' shared skeleton (app/api/middleware.py)."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope, Send

from app.api.middleware import HttpMiddleware, ResponseWatch


class _Marks(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["marked"] = True
        await self.app(scope, receive, send)


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "seen", "scope": dict(scope)})


def _run(scope: Scope) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def call() -> None:
        await _Marks(_inner)(scope, receive, send)

    asyncio.run(call())
    return sent


def test_only_http_reaches_the_subclass() -> None:
    assert _run({"type": "http"})[0]["scope"] == {"type": "http", "marked": True}
    assert _run({"type": "lifespan"})[0]["scope"] == {"type": "lifespan"}
    assert _run({"type": "websocket"})[0]["scope"] == {"type": "websocket"}


def test_a_watch_notes_the_start_and_passes_every_message_on() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    watch = ResponseWatch(send)
    assert (watch.started, watch.status) == (False, 500)  # the app failed before answering
    start = {"type": "http.response.start", "status": 201, "headers": []}
    body = {"type": "http.response.body", "body": b"{}"}
    asyncio.run(watch.send(start))
    asyncio.run(watch.send(body))
    assert (watch.started, watch.status) == (True, 201)
    assert sent == [start, body]
