"""Refuses request bodies above the configured size with 413, before they are parsed."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.api.middleware import HttpMiddleware, ResponseWatch


class _BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware(HttpMiddleware):
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        watch = ResponseWatch(send)
        try:
            await self.app(scope, counting_receive, watch.send)
        except _BodyTooLarge:
            # Once the app has started its answer, a 413 can no longer be sent.
            if not watch.started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, "too_large", f"request body is larger than the limit of {self.max_bytes} bytes"
        )
        await response(scope, receive, send)
