"""What a step of a purge of wide reach costs against the size of the server it reaches.

Run as a script, so that the library measured is whichever ``stm`` is first on the
path (this tree, or another checkout for a before/after comparison)::

    PYTHONPATH=. python benchmarks/page_count.py --rows 0 100000 300000 --reach 2000
    PYTHONPATH=. python benchmarks/page_count.py --database postgresql://... --rows 0 300000

For each size, one server holds ``rows`` distilled rows that no purge reaches, and
``reach`` more written from prompts that showed user 7 (each a chain of its own, written
through the store as upgrades are). User 7 is then purged in that server, one step at a
time as the writer runs it (``SweepPurge`` at full size); each step's time is what other
work queued behind the purge would wait. Reported: the steps that told a page of the
purge's ranges (each also says how many distilled rows the server holds), and all steps,
p50 / mean / max in ms, and what the longest step did. The server's size should not show
in the page steps.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.database import postgres_scratch
from stm._keys import server_key
from stm._lineage import Lineage
from stm.store._base import PurgeUser, SaveDistilled, StoredRow, SweepPurge

SERVER = 1
USER = 7
NOW = 1_700_000_000.0

_FILLER_SQLITE = (
    "WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
    "INSERT INTO short_term_memories (key, scope, server_id, user_id, channel_id, summary, "
    "updated_at, chain_id, chain_version) SELECT 'filler:' || i, 'user', ?, i, "
    "1000000 + i % 500, 'notes', ?, 100000000 + i, 1 FROM n"
)
_FILLER_POSTGRES = (
    "INSERT INTO short_term_memories (key, scope, server_id, user_id, channel_id, summary, "
    "updated_at, chain_id, chain_version) SELECT 'filler:' || i, 'user', $3, i, "
    "1000000 + i % 500, 'notes', $4, 100000000 + i, 1 FROM generate_series($1::bigint, $2) i"
)


def _row(channel: int) -> StoredRow:
    return StoredRow(
        key=server_key(SERVER, channel),
        scope="server",
        server_id=SERVER,
        user_id=None,
        channel_id=channel,
        persona_id=None,
        parent_channel_id=None,
        channel_name=f"c{channel}",
        server_name="busy",
        channel_private=False,
        summary=f"notes of channel {channel} with words of user {USER}",
        categories={},
        turns_since_refresh=0,
        last_refreshed_turn=0,
        updated_at=NOW,
    )


async def _fill(store: Any, postgres: bool, rows: int, reach: int) -> None:
    for start in range(0, reach, 250):
        saves = [
            SaveDistilled(_row(channel), None, Lineage(frozenset({USER}), (), ()))
            for channel in range(start, min(reach, start + 250))
        ]
        await store.run(saves)
    for start in range(1, rows + 1, 100_000):
        end = min(rows, start + 99_999)
        sql = _FILLER_POSTGRES if postgres else _FILLER_SQLITE
        await store.execute(sql, (start, end, SERVER, NOW))
    if postgres:
        await store.execute("VACUUM ANALYZE short_term_memories")


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.2f} / {statistics.fmean(ms):.2f} / {max(ms):.2f}"


async def _measure(store: Any, postgres: bool, rows: int, reach: int) -> dict[str, Any]:
    await _fill(store, postgres, rows, reach)
    started = time.perf_counter()
    (result,) = await store.run([PurgeUser(USER, SERVER, "direct")])
    steps, pages = [time.perf_counter() - started], []
    kinds: list[tuple[str, ...]] = [("first",)]
    held = None
    more = result.more
    while more:
        started = time.perf_counter()
        (step,) = await store.run([SweepPurge(result.position)])
        took = time.perf_counter() - started
        steps.append(took)
        kinds.append(step.phases)
        if step.ranges is not None:
            pages.append(took)
            if step.reach is not None and SERVER in step.reach.distilled_by_server:
                held = step.reach.distilled_by_server[SERVER]
        more = step.more
    longest = kinds[steps.index(max(steps))]
    return {
        "rows": rows,
        "reach": reach,
        "pages": pages,
        "steps": steps,
        "held": held,
        "longest": "+".join(longest),
    }


async def _one(rows: int, reach: int, database: str | None) -> dict[str, Any]:
    if database is None:
        from stm.store._sqlite import SQLiteStore

        with tempfile.TemporaryDirectory() as folder:
            store = await SQLiteStore.open(str(Path(folder) / "count.db"))
            try:
                return await _measure(store, False, rows, reach)
            finally:
                await store.close()
    from stm.store._postgres import PostgresStore

    async with postgres_scratch("page_count") as url:
        store = await PostgresStore.open(url)
        try:
            return await _measure(store, True, rows, reach)
        finally:
            await store.close()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[0, 100_000, 300_000])
    parser.add_argument("--reach", type=int, default=2000)
    parser.add_argument("--database", help="a postgresql:// server: measure PostgreSQL there")
    args = parser.parse_args(argv)
    if args.database:
        import os

        os.environ["STM_DATABASE"] = args.database
    store = "postgresql" if args.database else "sqlite"
    print(f"{store}: purge of a user whose words are in {args.reach} notes of one server")
    print("other distilled rows | steps | page steps p50 / mean / max (ms) | "
          "all steps p50 / mean / max (ms) | the longest step | server's count told")  # fmt: skip
    for rows in args.rows:
        found = await _one(rows, args.reach, args.database)
        print(
            f"{rows:>20,} | {len(found['steps']):>5} | {_summary(found['pages']):>33} | "
            f"{_summary(found['steps']):>32} | {found['longest']:>16} | {found['held']}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
