"""Service settings: read once from NEARDUP_* environment variables into one typed object."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The Redis layout's default and largest shard bits (app/backends/redis/store/layout.py: why 12).
REDIS_DEFAULT_SHARD_BITS = 12
REDIS_MAX_SHARD_BITS = 24


class Settings(BaseSettings):
    """Every knob of a running service. ``Settings()`` reads the environment."""

    model_config = SettingsConfigDict(env_prefix="NEARDUP_", frozen=True)

    data_dir: Path = Field(Path("data"), description="Where the service keeps its data.")
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="Port to listen on (0: any free).")
    synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL",
        description="SQLite synchronous mode: FULL survives power loss, NORMAL a process crash.",
    )
    segments: bool = Field(
        True,
        description="Keep the embedded indexes in segments on disk beside the database "
        "(neardup.segments/), so that a start maps them and replays only the later "
        "documents; off: every start rebuilds the indexes from the documents.",
    )
    log_level: str = Field("info", description="uvicorn log level.")
    max_body_bytes: int | None = Field(
        None,
        ge=1024,
        description="Largest request body accepted (413 above). Unset: room for one page of "
        "max_html_bytes sent as base64, and 1 MiB more (22.3 MB by default).",
    )
    max_text_chars: int = Field(
        1_000_000,
        ge=1,
        description="Longest document text, in characters (413 above); for a page, the text "
        "extracted from it.",
    )
    max_html_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="Largest page (a document sent with html or html_base64), in bytes of "
        "its HTML (413 above). A real news page is 0.1-2 MB.",
    )
    max_batch_documents: int = Field(
        1000, ge=1, description="Most documents in one batch insert (413 above)."
    )
    max_metadata_bytes: int = Field(
        16 * 1024, ge=0, description="Largest metadata object, as JSON (413 above)."
    )
    max_limit: int = Field(1000, ge=1, description="Largest `limit` a search may ask for.")
    max_collections: int = Field(1000, ge=1, description="Most collections (409 above).")
    max_documents: int | None = Field(
        None,
        ge=1,
        description="Most live documents over all collections together: an insert past it "
        "is refused with 507 insufficient_storage. Unset: no limit.",
    )
    api_keys: str | None = Field(
        None,
        description="Comma-separated API keys, each `<key>` or `<key>:write` (read and write) "
        "or `<key>:read` (search and get only). Unset with no key file: no authentication.",
    )
    api_key_file: Path | None = Field(
        None, description="A file of API keys, one `<key>[:read|:write]` per line, # comments."
    )
    audit_log: Path | None = Field(
        None,
        description="Also append the audit trail (one JSON line per write and key change) "
        "to this file; it always goes to the service's log stream.",
    )
    metrics_require_key: bool = Field(
        False, description="With API keys set, /metrics needs a key too (any role)."
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per log line, with the request id."
    )
    backend: str | None = Field(
        None,
        description="Unset: the embedded service (in-process indexes over SQLite in data_dir). "
        "redis://host:port[/db] (one Redis) or redis-cluster://host:port,host:port (a Redis "
        "Cluster, any of its nodes as seeds): every document, index, cluster and collection "
        "lives in Redis and any number of processes serve the same collections (docs/redis.md).",
    )
    workers: int = Field(
        1,
        ge=1,
        description="uvicorn worker processes of `neardup serve`. More than one needs "
        "NEARDUP_BACKEND (Redis: every process is stateless); the embedded service owns its "
        "indexes in one process.",
    )
    redis_shard_bits: int = Field(
        REDIS_DEFAULT_SHARD_BITS,
        ge=0,
        le=REDIS_MAX_SHARD_BITS,
        description="Redis backend: each index table of a collection created from now on is "
        "split into 2^bits sorted sets; about log2(expected documents / 64) keeps a set near "
        "64 members (12: up to ~250,000 documents, 14: ~1M, 16: ~4M; docs/redis.md). Recorded "
        "with the collection: every process reads it from there.",
    )
    redis_wait_replicas: int = Field(
        0,
        ge=0,
        description="Redis backend: an insert or delete is answered only once this many replicas "
        "of every Redis node it wrote to have its writes (WAIT); 503 if they fall behind.",
    )

    @property
    def body_limit_bytes(self) -> int:
        """max_body_bytes, or what a page of max_html_bytes needs as base64 in JSON."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return max(16 * 1024 * 1024, -(-self.max_html_bytes * 4 // 3) + 1024 * 1024)

    @field_validator("backend")
    @classmethod
    def _backend_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("redis://", "rediss://", "unix://", "redis-cluster://")):
            raise ValueError(
                "NEARDUP_BACKEND is unset (the embedded service), redis://host:port[/db] or "
                f"redis-cluster://host:port,host:port, not {value!r}"
            )
        return value
