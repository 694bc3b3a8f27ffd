"""A process that opens fresh databases (SQLite files, PostgreSQL schemas) at the same
moment as its siblings (see tests/test_store_open.py)."""

from __future__ import annotations

import asyncio
from typing import Any


async def _open_once(path: str) -> tuple[bool, int]:
    from stm.store._sqlite import SQLiteStore

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


async def _open_url_once(url: str) -> int:
    from stm import STMConfig
    from stm.store import open_store

    store = await open_store(STMConfig(database=url))
    try:
        return await store.schema_version()  # type: ignore[attr-defined, no-any-return]
    finally:
        await store.close()


def open_urls_in_step(urls: list[str], barrier: Any, results: Any) -> None:
    """For each URL (an empty PostgreSQL schema): wait for every sibling, then open it."""
    for trial, url in enumerate(urls):
        barrier.wait()
        try:
            results.put((trial, asyncio.run(_open_url_once(url)), None))
        except Exception as exc:  # reported to the test, which fails on it
            results.put((trial, None, f"{type(exc).__name__}: {exc}"))
