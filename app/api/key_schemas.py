"""The bodies and answers of /v1/keys."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from app.service.keys import ACTIONS, Action, Grant, check_pattern

Pattern = Annotated[
    str,
    Field(
        min_length=1,
        max_length=65,
        description="A collection name, a prefix followed by * (`news-*`), or `*`.",
    ),
    AfterValidator(check_pattern),
]
Name = Annotated[str, Field(min_length=1, max_length=100)]
Description = Annotated[str, Field(max_length=1000)]
Actions = Annotated[list[Action], Field(min_length=1, max_length=len(ACTIONS))]
Patterns = Annotated[list[Pattern], Field(min_length=1, max_length=100)]
PerSecond = Annotated[float, Field(gt=0, le=1e9)]


def _text_only(value: object) -> object:
    """A time is ISO 8601 text: a number is refused (seconds or milliseconds would be a
    guess)."""
    if not isinstance(value, str | datetime):
        raise ValueError("not an ISO 8601 time such as 2026-01-01T00:00:00Z")
    return value


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


Moment = Annotated[datetime, BeforeValidator(_text_only), AfterValidator(_utc)]


class RateIn(BaseModel):
    """A key's rate; a field left out or null is no limit."""

    model_config = ConfigDict(extra="forbid")
    requests_per_second: PerSecond | None = None
    documents_per_second: PerSecond | None = None


class RateOut(BaseModel):
    requests_per_second: float | None
    documents_per_second: float | None


class KeyIn(BaseModel):
    """A new key: what it may do (`actions`) to which collections (`collections`)."""

    model_config = ConfigDict(extra="forbid")
    name: Name
    description: Description = ""
    actions: Actions = Field(
        description="search (search, similar, get), documents.add, documents.delete, "
        "collections.create, collections.delete, collections.settings, export, metrics, "
        "or * for all of them."
    )
    collections: Patterns
    expires_at: Moment | None = Field(
        None, description="When the key stops working (ISO 8601; UTC when no offset)."
    )
    rate: RateIn | None = None

    def changes(self) -> dict[str, Any]:
        return _changes(self.model_dump())


class KeyPatch(BaseModel):
    """Fields to change; one left out keeps its value, a null `expires_at` or `rate`
    removes it."""

    model_config = ConfigDict(extra="forbid")
    name: Name | None = None
    description: Description | None = None
    actions: Actions | None = None
    collections: Patterns | None = None
    expires_at: Moment | None = None
    rate: RateIn | None = None

    def changes(self) -> dict[str, Any]:
        given = self.model_dump(exclude_unset=True)
        for required in ("name", "actions", "collections"):
            if required in given and given[required] is None:
                del given[required]  # null is no change: these cannot be removed
        return _changes(given)


def _changes(given: dict[str, Any]) -> dict[str, Any]:
    if given.get("expires_at") is not None:
        moment: datetime = given["expires_at"]
        given["expires_at"] = moment.timestamp()
    return given


class KeyOut(BaseModel):
    id: str
    name: str
    description: str
    actions: list[str]
    collections: list[str]
    expires_at: datetime | None
    created_at: datetime
    rate: RateOut

    @classmethod
    def of(cls, grant: Grant) -> KeyOut:
        shown = grant.public()
        expires = shown["expires_at"]
        shown["expires_at"] = datetime.fromtimestamp(expires, UTC) if expires is not None else None
        shown["created_at"] = datetime.fromtimestamp(shown["created_at"], UTC)
        return cls.model_validate(shown)


class KeyCreated(KeyOut):
    key: str = Field(description="The key itself: shown this once, only its digest is kept.")


class KeyList(BaseModel):
    keys: list[KeyOut]
