"""/v1/keys: create, list, read, change and revoke the stored API keys (admin keys only:
the gate, app/api/auth.py, refuses every other key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response

from app.api.deps import ERROR_RESPONSES
from app.api.key_schemas import KeyCreated, KeyIn, KeyList, KeyOut, KeyPatch
from app.service.key_ring import KeyRing
from app.service.keys import Rate

router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=ERROR_RESPONSES)
KeyId = Annotated[str, Path(min_length=1, max_length=64)]


async def get_key_ring(request: Request) -> KeyRing:
    ring: KeyRing = request.app.state.key_ring
    return ring


KeyRingDep = Annotated[KeyRing, Depends(get_key_ring)]


# Plain def: each call reads or writes the key store (SQLite or Redis).
@router.post("", status_code=201)
def create_key(body: KeyIn, ring: KeyRingDep) -> KeyCreated:
    """A new key. Its secret (`key`) is in this answer only: only its digest is kept."""
    changes = body.changes()
    rate = Rate(**changes["rate"]) if changes.get("rate") else None
    grant, secret = ring.create(
        body.name,
        list(body.actions),
        list(body.collections),
        body.description,
        changes.get("expires_at"),
        rate,
    )
    return KeyCreated(**KeyOut.of(grant).model_dump(), key=secret)


@router.get("")
def list_keys(ring: KeyRingDep) -> KeyList:
    return KeyList(keys=[KeyOut.of(grant) for grant in ring.all()])


@router.get("/{key_id}")
def get_key(key_id: KeyId, ring: KeyRingDep) -> KeyOut:
    return KeyOut.of(ring.get(key_id))


@router.patch("/{key_id}")
def update_key(key_id: KeyId, changes: KeyPatch, ring: KeyRingDep) -> KeyOut:
    """Change a key's name, description, actions, collections, expiry or rate; every
    process applies it within a fraction of a second."""
    return KeyOut.of(ring.update(key_id, changes.changes()))


@router.delete("/{key_id}", status_code=204)
def delete_key(key_id: KeyId, ring: KeyRingDep) -> Response:
    """Revoke a key: refused by every process within a fraction of a second."""
    ring.delete(key_id)
    return Response(status_code=204)
