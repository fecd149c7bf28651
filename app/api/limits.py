"""Size limits of requests, each a 413 with a message that says which limit."""

from __future__ import annotations

import json
from typing import Any

from app.config import Settings
from app.errors import TooLarge


def check_text(settings: Settings, text: str, what: str = "text") -> None:
    if len(text) > settings.max_text_chars:
        raise TooLarge(
            f"{what}: text has {len(text)} characters, "
            f"more than the limit of {settings.max_text_chars}"
        )


def check_metadata(
    settings: Settings, metadata: dict[str, Any] | None, what: str = "metadata"
) -> None:
    if metadata is None:
        return
    size = len(json.dumps(metadata, ensure_ascii=False).encode())
    if size > settings.max_metadata_bytes:
        raise TooLarge(
            f"{what}: metadata is {size} bytes as JSON, "
            f"more than the limit of {settings.max_metadata_bytes}"
        )


def check_batch(settings: Settings, count: int) -> None:
    if count > settings.max_batch_documents:
        raise TooLarge(
            f"a batch holds at most {settings.max_batch_documents} documents, not {count}"
        )


def check_limit(settings: Settings, limit: int) -> None:
    if limit > settings.max_limit:
        raise TooLarge(f"limit may be at most {settings.max_limit}, not {limit}")
