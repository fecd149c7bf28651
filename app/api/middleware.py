"""The skeleton of our pure-ASGI middlewares, written once.

``HttpMiddleware`` lets every scope that is not HTTP (lifespan, websocket) through to the
app untouched and hands HTTP requests to the subclass's ``http``. ``ResponseWatch`` wraps
the ``send`` a middleware hands the app to see the response go out: its status, whether
it started, and hooks to change the start (headers) or note the body.

Both sit on the path of every request that is not a hot route (app/api/hot.py), so
neither allocates more than the hand-written middlewares did: ``HttpMiddleware.__call__``
is a plain function that returns the coroutine it picks rather than a coroutine of its
own, and a ``ResponseWatch`` and its bound ``send`` are two objects a request where each
middleware built a closure, its tuple and its cells.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HttpMiddleware:
    """A middleware that acts on HTTP requests only; subclasses write ``http``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not async: the caller awaits the app's or ``http``'s coroutine itself, so the
        # dispatch adds no coroutine a request.
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        return self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class ResponseWatch:
    """Watches the response go out through ``send``, the callable to hand the app: notes
    its status as it starts (500 until then, the status to report when the app fails
    before answering) and passes every message on to the wrapped ``send``.

    Subclasses that note more override ``starting`` or ``sending``, not ``send``.
    """

    # ``send`` is a method rather than __call__: CPython calls an instance through
    # slot_tp_call, slower on each message than making the bound method once.
    __slots__ = ("_send", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.status = 500

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
            self.starting(message)
        else:
            self.sending(message)
        await self._send(message)

    def starting(self, message: Message) -> None:
        """The response's start, before it is sent: a subclass may change its headers."""

    def sending(self, message: Message) -> None:
        """Any later message (the body), before it is sent."""
