"""A store for tests that wraps a real SQLite store and fails on demand."""

from __future__ import annotations

from collections.abc import Sequence

from stm import ShortTermMemory, STMConfig
from stm.store.base import LoadRows, Op
from stm.store.sqlite import SQLiteStore

__all__ = ["FaultyStore", "faulty_memory"]


class FaultyStore:
    """A real store whose transactions fail while ``broken`` is set or for the next
    ``failures`` batches, and whose reads answer garbage while ``garbage_reads`` is set.
    ``batches`` records the operation names of every batch it was given."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.broken = False
        self.failures = 0
        self.garbage_reads = False
        self.batches: list[list[str]] = []

    async def run(self, ops: Sequence[Op]) -> list[object]:
        self.batches.append([type(op).__name__ for op in ops])
        if self.failures:
            self.failures -= 1
            raise OSError("disk unavailable")
        if self.broken:
            raise OSError("disk unavailable")
        results = await self.inner.run(ops)
        if self.garbage_reads:
            return [
                [None] if isinstance(op, LoadRows) else r
                for op, r in zip(ops, results, strict=True)
            ]
        return results

    @property
    def empty_at_open(self) -> bool:
        return self.inner.empty_at_open

    async def load_server_settings(self) -> dict[int, str]:
        return await self.inner.load_server_settings()

    async def load_opt_outs(self) -> set[int]:
        return await self.inner.load_opt_outs()

    async def close(self) -> None:
        await self.inner.close()


async def faulty_memory(
    config: STMConfig, **memory_options: object
) -> tuple[ShortTermMemory, FaultyStore]:
    """An open memory on a FaultyStore over ``config.database``."""
    store = FaultyStore(await SQLiteStore.open(config.database))
    memory = await ShortTermMemory.open(config, store=store, **memory_options)  # type: ignore[arg-type]
    return memory, store
