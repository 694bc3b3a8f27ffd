"""The longest upgrade stall while purges are made durable and erased, at several sizes.

Run as a script, so that the library measured is whichever ``stm`` is first on the
path (this tree, or another checkout for a before/after comparison)::

    PYTHONPATH=. python benchmarks/stall.py --rows 100000 1000000 3000000
    PYTHONPATH=. python benchmarks/stall.py --rows 1000000 --blast 10000
    PYTHONPATH=. python benchmarks/stall.py --rows 1000000 --blast 10000 \
        --database postgresql://postgres@127.0.0.1:5432/postgres --trace

For each size it builds a database of that many rows (one in five holding a
~200-character summary and its contributor) with the library's own schema,
then, while one task upgrades memory in a loop (each ``run_tool`` waits for its
commit), purges users one after another, each followed by ``flush()`` (the
delete committed and its text erased from the files). It prints the longest and
the median upgrade during the purges, the same without purges, and how long
each purge + flush took. With ``--blast N`` one more user's words are in the notes of N
entries (spread over the servers), and that user is purged first: its purge reaches all
of them, and the longest upgrade during it is reported apart (the upgrader works in a
server of its own, so it waits only for the purge's transactions, never for its rows).
With ``--database postgresql://...`` the same rows are loaded (``COPY``, with the
library's schema, keys and sealed text as it writes them) into a scratch database on
that server, dropped afterwards. ``--trace`` times every batch of the store and prints
the longest, with the operations each held: what the upgrades waited for. ``--expire N``
then queues a janitor pass that deletes the N rows last active longest ago (as
``run_janitor`` does), and reports how long upgrades waited behind it and how long a
member's ``purge()`` made half a second into the pass took to answer. ``--purge-during``
purges another member right after the ``--blast`` purge is planned, while it is swept,
and reports how long that purge took to answer.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import LargestFile, bare_schema, credit
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm.store._base import DeleteExpired, Op, PurgeUser, Scrub, SweepPurge

USERS_PER_SERVER = 100
ROWS_PER_USER = 5  # user-scoped rows per user; as many server-scoped rows again


def build(path: Path, rows: int, blast: int = 0) -> int:
    """Write ``rows`` rows at the library's schema, the words of user ``users + 1`` in the
    notes of ``blast`` of them; returns the number of users."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    later = bare_schema(db)
    db.execute("BEGIN")
    insert = (
        "INSERT INTO short_term_memories (id, key, scope, server_id, user_id, channel_id, "
        "channel_name, summary, turns_since_refresh, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
    )
    users, records, contributors = _rows(rows, blast)
    for start in range(0, len(records), 50_000):
        chunk = records[start : start + 50_000]
        db.executemany(insert, [(start + n, *r) for n, r in enumerate(chunk, start=1)])
    credit(db, contributors)
    for statement in later:
        db.execute(statement)
    try:  # a library that stores distilled text encrypted: encrypt it, as its migration does
        from stm.store._shred import seal_legacy
    except ImportError:
        pass
    else:
        seal_legacy(db)
    db.execute("COMMIT")
    db.execute("VACUUM")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return users


def _rows(rows: int, blast: int) -> tuple[int, list[tuple[object, ...]], list[tuple[int, int]]]:
    """The rows ``build`` writes, as tuples (ids from 1), and the (user, row id) credits."""
    users = max(1, rows // (2 * ROWS_PER_USER))
    rng = random.Random(7)
    now = time.time()
    text = " ".join(["lorem ipsum dolor sit amet"] * 8)
    out: list[tuple[object, ...]] = []
    contributors: list[tuple[int, int]] = []
    row_id = 0
    for user in range(1, users + 1):
        server = 1 + user // USERS_PER_SERVER
        for n in range(ROWS_PER_USER):
            channel = server * 1000 + (user + n) % 500
            for scope in ("user", "server"):
                row_id += 1
                summary = None
                if row_id % 5 == 0:
                    summary = f"{text} {row_id}"
                    contributors.append((user, row_id))
                key = (
                    f"shortterm:user:{user}:{channel}:{row_id}"
                    if scope == "user"
                    else f"shortterm:server:{server}:{channel}:{row_id}"
                )
                out.append((
                    key, scope, server, user if scope == "user" else None, channel,
                    "general", summary, 0, now - rng.uniform(0, 3600),
                ))  # fmt: skip
    distilled = [row_id for _, row_id in contributors]
    contributors += [(users + 1, row_id) for row_id in distilled[:blast]]
    return users, out, contributors


async def build_postgres(url: str, rows: int, blast: int = 0) -> int:
    """``build`` on PostgreSQL: the schema made by the library, then the rows copied in with
    their keys and sealed text as the library stores them; returns the number of users."""
    try:
        import asyncpg
    except ImportError:  # the postgres extra
        raise SystemExit("asyncpg is not installed: pip install -e '.[postgres]'") from None
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    from stm.store import _shred as shred

    memory = await ShortTermMemory.open(STMConfig(database=url))  # migrations only
    await memory.close()
    users, records, contributors = _rows(rows, blast)
    sealer = shred.TextSealer()
    keys: list[tuple[int, bytes]] = []
    sealed: list[tuple[object, ...]] = []
    for row_id, (key, *fields) in enumerate(records, start=1):
        summary = fields[5]
        slot = None
        if summary is not None:
            secret = shred.new_key()
            keys.append((row_id, secret))
            slot = row_id
            fields[5] = sealer.seal(ChaCha20Poly1305(secret), str(key), str(summary))
        sealed.append((row_id, key, *fields, slot))
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL statement_timeout = 0")
            await conn.copy_records_to_table("stm_keys", records=keys, columns=["slot", "key"])
            await conn.execute(
                "SELECT setval(pg_get_serial_sequence('stm_keys', 'slot'), $1)", len(records) + 1
            )
            # ``id`` is GENERATED ALWAYS: copied through a staging table with OVERRIDING.
            await conn.execute(
                "CREATE TEMP TABLE staged (id BIGINT, key TEXT, scope TEXT, server_id BIGINT, "
                "user_id BIGINT, channel_id BIGINT, channel_name TEXT, summary TEXT, "
                "turns_since_refresh INT, updated_at DOUBLE PRECISION, key_slot BIGINT) "
                "ON COMMIT DROP"
            )
            await conn.copy_records_to_table("staged", records=sealed)
            await conn.execute(
                "INSERT INTO short_term_memories (id, key, scope, server_id, user_id, channel_id, "
                "channel_name, summary, turns_since_refresh, updated_at, key_slot) "
                "OVERRIDING SYSTEM VALUE SELECT * FROM staged"
            )
            await conn.execute(
                "SELECT setval(pg_get_serial_sequence('short_term_memories', 'id'), $1)",
                len(records) + 1,
            )
            # Each distilled row the first version of a chain of its own, its credits members.
            await conn.execute(
                "INSERT INTO stm_chains (id, live_key, server_id, head) "
                "SELECT id, key, server_id, 1 FROM short_term_memories WHERE summary IS NOT NULL"
            )
            await conn.execute(
                "SELECT setval(pg_get_serial_sequence('stm_chains', 'id'), $1)", len(records) + 1
            )
            await conn.execute(
                "UPDATE short_term_memories SET chain_id = id, chain_version = 1 "
                "WHERE summary IS NOT NULL"
            )
            await conn.copy_records_to_table(
                "stm_chain_members",
                records=[(user, row_id, 1) for user, row_id in contributors],
                columns=["member", "chain_id", "first"],
            )
            await conn.execute(  # each membership's server, as the library writes it
                "UPDATE stm_chain_members SET server_id = "
                "(SELECT c.server_id FROM stm_chains c WHERE c.id = stm_chain_members.chain_id)"
            )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return users


LONG_BATCHES: list[tuple[float, str]] = []


def trace_batches(threshold_ms: float = 15.0) -> None:
    """Time every batch either store runs, keeping those over ``threshold_ms`` with the
    kinds of operation they held: what other work waited for."""
    from collections import Counter

    from stm.store._postgres import PostgresStore
    from stm.store._sqlite import SQLiteStore

    for cls in (SQLiteStore, PostgresStore):
        original = cls.run

        async def run(self: object, ops: list[object], _original: object = original) -> object:
            t0 = time.perf_counter()
            results: object = None
            try:
                results = await _original(self, ops)  # type: ignore[operator]
                return results
            finally:
                ms = (time.perf_counter() - t0) * 1e3
                if ms > threshold_ms:
                    kinds = Counter(type(op).__name__ for op in ops).most_common()
                    text = ", ".join(f"{k} ×{n}" for k, n in kinds)
                    # A purge's step says which kinds of work it did, at which sizes.
                    phases = getattr((results or [None])[0], "phases", ())  # type: ignore[index]
                    if phases:
                        sizes = getattr(ops[0], "size_of", None)
                        shares = [f"{p} {sizes(p):.2f}" if sizes else p for p in phases]
                        text += f" ({', '.join(shares)})"
                    LONG_BATCHES.append((ms, text))

        cls.run = run  # type: ignore[method-assign,assignment]


def print_long_batches(count: int = 10) -> None:
    for ms, kinds in sorted(LONG_BATCHES, reverse=True)[:count]:
        print(f"    batch {ms:,.1f} ms: {kinds}")
    LONG_BATCHES.clear()


def ctx(n: int) -> TurnContext:
    return TurnContext(user_id=10**9 + n % 50, channel_id=10**9 + n % 50, server_id=10**9)


async def measure(
    path: Path | str,
    users: int,
    purges: int,
    blast: int = 0,
    expire: int = 0,
    purge_during: bool = False,
) -> dict[str, float]:
    config = STMConfig(database=str(path))
    memory = await ShortTermMemory.open(config)
    latencies: list[tuple[float, float]] = []  # (start, seconds)
    stop = asyncio.Event()
    # When the store ran a purge's transactions (its steps, and the erasure after them):
    # the time an upgrade spent while one ran is the time it waited behind the purge.
    purge_work: list[tuple[float, float]] = []
    janitor_work: list[tuple[float, float]] = []  # the same, of a janitor pass (--expire)
    run = memory.store.run

    async def timed_run(ops: Sequence[Op]) -> list[object]:
        t0 = time.perf_counter()
        try:
            return await run(ops)
        finally:
            if any(isinstance(op, PurgeUser | SweepPurge | Scrub) for op in ops):
                purge_work.append((t0, time.perf_counter()))
            if any(isinstance(op, DeleteExpired) for op in ops):
                janitor_work.append((t0, time.perf_counter()))

    memory.store.run = timed_run  # type: ignore[method-assign]

    def waited(t: float, s: float, work: list[tuple[float, float]] = purge_work) -> float:
        """How long the upgrade that began at ``t`` and took ``s`` waited behind a purge."""
        return sum(max(0.0, min(t + s, end) - max(t, begin)) for begin, end in work)

    cut = 0.0
    if expire:
        # The time before which ``expire`` of the built rows were last active: a janitor
        # pass with both thresholds there deletes them (the upgrader's rows are newer).
        (row,) = await memory.store.execute(  # type: ignore[attr-defined]
            "SELECT updated_at FROM short_term_memories ORDER BY updated_at "
            f"LIMIT 1 OFFSET {expire - 1}"
        )
        cut = float(row[0])

    async def upgrader() -> None:
        n = 0
        while not stop.is_set():
            c = ctx(n)
            await memory.capture(
                GenerationFinished(
                    context=c,
                    messages=[
                        DialogueMessage(role="user", content=f"m{n}", author_id=c.user_id),
                        DialogueMessage(role="assistant", content="ok"),
                    ],
                )
            )
            t0 = time.perf_counter()
            result = await memory.run_tool(c, {"summary": f"upgrade {n}"})
            latencies.append((t0, time.perf_counter() - t0))
            assert result.success, result.message
            n += 1
            await asyncio.sleep(0)

    wal = LargestFile(f"{path}-wal")  # SQLite: the largest the WAL grows meanwhile
    try:
        wal.start()
        task = asyncio.create_task(upgrader())
        await asyncio.sleep(1.0)  # warm-up, then a baseline without purges
        base_from = time.perf_counter()
        await asyncio.sleep(2.0)
        base_to = time.perf_counter()
        wide: dict[str, float] = {}
        if blast:
            # The purge of the user whose words are in ``blast`` entries' notes.
            # As ``purge()``, in its two steps: the clear returns once the store planned what
            # it reaches (until then upgrades in its scope, every server here, wait for the
            # plan), ``flush()`` once the rest is swept and erased.
            reach = await memory.preview_purge(users + 1)
            t0 = time.perf_counter()
            await memory.clear_short_term_memory_for_user(users + 1)
            planned = time.perf_counter()
            if purge_during:
                # Another member's purge while the wide one is swept: when it answers.
                p0 = time.perf_counter()
                await memory.purge(random.Random(5).randrange(1, users + 1))
                wide["purge_during_blast_ms"] = (time.perf_counter() - p0) * 1e3
            await memory.flush()
            t1 = time.perf_counter()
            during_plan = [s for t, s in latencies if t + s >= t0 and t <= planned]
            wide |= {
                "blast_cleared": float(reach.shared + reach.own),
                "blast_plan_ms": (planned - t0) * 1e3,
                "blast_purge_flush_ms": (t1 - t0) * 1e3,
                "blast_stall_max_ms": max(s for t, s in latencies if t + s >= t0 and t <= t1) * 1e3,
                "blast_wait_max_ms": max(
                    waited(t, s) for t, s in latencies if t + s >= t0 and t <= t1
                )
                * 1e3,
                "blast_stall_max_during_plan_ms": max(during_plan, default=0.0) * 1e3,
            }
        rng = random.Random(3)
        purge_times = []
        window_from = time.perf_counter()
        for _ in range(purges):
            t0 = time.perf_counter()
            await memory.clear_short_term_memory_for_user(rng.randrange(1, users + 1))
            await memory.flush()
            purge_times.append(time.perf_counter() - t0)
        window_to = time.perf_counter()
        if expire:
            # As ``run_janitor`` queues it (with whatever chunking the library does).
            t0 = time.perf_counter()
            memory.writer.submit_change(DeleteExpired(cut, cut), what="deleting expired rows")
            # A member's purge during the pass: how long until it answers.
            await asyncio.sleep(0.5)
            p0 = time.perf_counter()
            await memory.purge(rng.randrange(1, users + 1))
            wide["janitor_purge_ms"] = (time.perf_counter() - p0) * 1e3
            await memory.flush()
            t1 = time.perf_counter()
            spans = [(t, s) for t, s in latencies if t + s >= t0 and t <= t1]
            wide["janitor_deleted"] = float(expire)
            wide["janitor_flush_ms"] = (t1 - t0) * 1e3
            wide["janitor_stall_max_ms"] = max(s for _, s in spans) * 1e3
            wide["janitor_wait_max_ms"] = max(waited(t, s, janitor_work) for t, s in spans) * 1e3
            wide["janitor_transactions"] = float(len(janitor_work))
        stop.set()
        await task
    finally:
        wal.stop()
        await memory.close()

    def during(a: float, b: float) -> list[float]:
        # Every upgrade that overlapped the window, including one that began before it.
        return [s for t, s in latencies if t + s >= a and t <= b]

    base, purged = during(base_from, base_to), during(window_from, window_to)
    waits = [waited(t, s) for t, s in latencies if t + s >= window_from and t <= window_to]
    return {
        "baseline_max_ms": max(base) * 1e3,
        "baseline_p50_ms": statistics.median(base) * 1e3,
        "stall_max_ms": max(purged) * 1e3,
        "wait_max_ms": max(waits) * 1e3,
        "stall_p50_ms": statistics.median(purged) * 1e3,
        "stall_mean_ms": statistics.fmean(purged) * 1e3,
        "purge_flush_p50_ms": statistics.median(purge_times) * 1e3,
        "purge_flush_max_ms": max(purge_times) * 1e3,
        "upgrades_during": len(purged),
        **wide,
        **({} if str(path).startswith("postgres") else {"largest_wal_mib": wal.largest / 2**20}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 3_000_000])
    parser.add_argument("--purges", type=int, default=10)
    parser.add_argument(
        "--blast", type=int, default=0, help="entries whose notes hold one user's words"
    )
    parser.add_argument(
        "--expire", type=int, default=0, help="then a janitor pass deleting this many rows"
    )
    parser.add_argument(
        "--purge-during",
        action="store_true",
        help="with --blast: another member's purge while the wide one is swept",
    )
    parser.add_argument("--dir", default=None, help="where to build the databases")
    parser.add_argument(
        "--database", default="", help="a postgresql:// server: measure PostgreSQL there"
    )
    parser.add_argument(
        "--trace", action="store_true", help="print the store's longest batches after each size"
    )
    args = parser.parse_args()
    import stm

    if args.trace:
        trace_batches()

    print(f"library: {Path(stm.__file__).parent}  sqlite {sqlite3.sqlite_version}")
    if args.database:
        asyncio.run(
            _postgres(
                args.database, args.rows, args.purges, args.blast, args.expire, args.purge_during
            )
        )
        return
    folder = Path(args.dir or tempfile.mkdtemp(prefix="stm-stall-"))
    for rows in args.rows:
        path = folder / f"stall-{rows}.sqlite3"
        for suffix in ("", "-wal", "-shm", "-stm-pending"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        t0 = time.perf_counter()
        users = build(path, rows, args.blast)
        built = time.perf_counter() - t0
        size = path.stat().st_size / 2**20
        result = asyncio.run(
            measure(path, users, args.purges, args.blast, args.expire, args.purge_during)
        )
        print(
            f"{rows:>9,} rows ({size:,.0f} MiB, built in {built:.0f} s): "
            + ", ".join(f"{k} {v:,.1f}" for k, v in result.items())
        )
        print_long_batches()
        for suffix in ("", "-wal", "-shm", "-stm-pending"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    if args.dir is None:
        shutil.rmtree(folder, ignore_errors=True)


async def _postgres(
    server: str,
    sizes: list[int],
    purges: int,
    blast: int,
    expire: int = 0,
    purge_during: bool = False,
) -> None:
    import os

    os.environ["STM_BENCH_DATABASE"] = server
    from benchmarks.database import postgres_scratch

    for rows in sizes:
        async with postgres_scratch(f"stall{rows}") as url:
            t0 = time.perf_counter()
            users = await build_postgres(url, rows, blast)
            built = time.perf_counter() - t0
            result = await measure(url, users, purges, blast, expire, purge_during)
        print(
            f"{rows:>9,} rows on PostgreSQL (built in {built:.0f} s): "
            + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()),
            flush=True,
        )
        print_long_batches()


if __name__ == "__main__":
    main()
