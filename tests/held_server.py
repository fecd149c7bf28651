"""A real `neardup` server process whose start-up rebuild waits for a line on its stdin.

    python -m tests.held_server PORT DATA_DIR

The service starts (``/healthz`` answers) but answers 503 ``not_ready`` with
``Retry-After: 1`` on /readyz and every /v1 route until the test writes a line: a
client's retries during the rebuild are tested without timing guesses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

from app.config import Settings
from app.main import DATABASE_FILE, create_app
from app.storage.base import SavedRows, StoredCollection, no_saved_rows
from app.storage.sqlite import SQLiteStore


class HeldStore(SQLiteStore):
    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        sys.stdin.readline()  # the test lets the rebuild go on
        return super().load(saved_rows, texts=texts)


def main() -> None:
    port, data_dir = int(sys.argv[1]), Path(sys.argv[2])
    settings = Settings(host="127.0.0.1", port=port, data_dir=data_dir, log_level="warning")
    data_dir.mkdir(parents=True, exist_ok=True)
    app = create_app(
        settings,
        store_factory=lambda s: HeldStore(s.data_dir / DATABASE_FILE, s.synchronous),
    )
    uvicorn.run(app, host=settings.host, port=port, log_level="warning", workers=1)


if __name__ == "__main__":
    main()
