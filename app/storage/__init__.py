"""The durable record of collections and documents, behind the Store interface."""

from app.storage.base import DocumentBatch, Store, StoredCollection
from app.storage.memory import MemoryStore

__all__ = ["DocumentBatch", "MemoryStore", "Store", "StoredCollection"]
