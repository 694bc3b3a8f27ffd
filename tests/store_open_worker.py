"""A process that opens fresh SQLite files at the same moment as its siblings (see
tests/test_store_open.py)."""

from __future__ import annotations

import asyncio
from typing import Any


async def _open_once(path: str) -> tuple[bool, int]:
    from stm.store.sqlite import SQLiteStore

    store = await SQLiteStore.open(path, busy_timeout_ms=20_000)
    try:
        return store.empty_at_open, await store.schema_version()
    finally:
        await store.close()


def open_in_step(base: str, trials: int, barrier: Any, results: Any) -> None:
    """For each trial: wait for every sibling, then open ``{base}-{trial}.sqlite3``."""
    for trial in range(trials):
        barrier.wait()
        try:
            empty, version = asyncio.run(_open_once(f"{base}-{trial}.sqlite3"))
            results.put((trial, empty, version, None))
        except Exception as exc:  # reported to the test, which fails on it
            results.put((trial, None, None, f"{type(exc).__name__}: {exc}"))
