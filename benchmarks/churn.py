"""Churn: many distinct users through a small cache; the process's memory must stay flat.

    python -m benchmarks.churn --store sqlite --users 150000
    python -m benchmarks.churn --store postgresql --users 150000 \\
        --database postgresql://postgres@127.0.0.1:5432/postgres

Each user makes one capture in a server channel (seven channels of one server) and one
``build_context`` in a DM of their own, in that order, with ``cache_max_keys`` at 50:
almost every key is evicted soon after its one turn, and every DM read misses the cache.
Every ``--every`` users it prints the resident set size (RSS) of the process and, on
SQLite, what SQLite itself has allocated (``sqlite3_memory_used``) and its high-water
mark, each after a garbage collection. The write-behind writes what the captures
changed once a second (``write_behind_seconds``), in batches of however many keys
changed meanwhile; every read is a round trip of its own. What the cache evicts is in
the store, so nothing of a user should stay in the process once its keys are gone: a
line that keeps growing is memory kept per user (or per batch), not per held key.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import os
import sys
import time
from typing import Any

from .common import rss_bytes, settle
from .database import Skipped, memory_database, open_memory

CACHE_MAX_KEYS = 50
SERVER = 100
CHANNELS = 7


def sqlite_memory() -> Any | None:
    """``sqlite3_memory_used`` and ``sqlite3_memory_highwater`` of the SQLite library the
    ``sqlite3`` module uses (its own module, where SQLite is linked in, else the system's
    library), or None where neither exports them."""
    import _sqlite3

    # The module's own file first (SQLite linked into it, or the library it loads); the
    # system's library only if that exports nothing (looking for it runs ldconfig).
    for find in (lambda: _sqlite3.__file__, lambda: ctypes.util.find_library("sqlite3")):
        name = find()
        if not name:
            continue
        try:
            library = ctypes.CDLL(name)
            library.sqlite3_memory_used.restype = ctypes.c_int64
            library.sqlite3_memory_highwater.restype = ctypes.c_int64
            library.sqlite3_memory_highwater.argtypes = [ctypes.c_int]
        except (OSError, AttributeError):
            continue
        return library
    return None


def _mib(value: int) -> str:
    return f"{value / 2**20:8.1f}"


async def churn(store: str, users: int, every: int) -> list[dict[str, Any]]:
    from stm.testing import ctx, turn

    library = sqlite_memory() if store == "sqlite" else None
    lines: list[dict[str, Any]] = []
    async with memory_database(store, "churn") as database:
        memory = await open_memory(database, cache_max_keys=CACHE_MAX_KEYS)
        try:
            started = time.perf_counter()
            for n in range(users + 1):
                if n % every == 0:
                    settle()
                    line = {
                        "users": n,
                        "rss": rss_bytes(),
                        "seconds": time.perf_counter() - started,
                        "held": memory.stats["cached_keys"],
                    }
                    if library is not None:
                        line["sqlite"] = library.sqlite3_memory_used()
                        line["sqlite_high"] = library.sqlite3_memory_highwater(0)
                    lines.append(line)
                    _print(line)
                if n == users:
                    break
                user = 1_000_000 + n
                here = ctx(user=user, channel=500 + n % CHANNELS, server=SERVER)
                await memory.capture(turn(here, f"hi {n}"))
                await memory.build_context(ctx(user=user, channel=9_000_000 + n, server=None))
            await memory.flush()
        finally:
            await memory.close()
    return lines


def _print(line: dict[str, Any]) -> None:
    sqlite = ""
    if "sqlite" in line:
        sqlite = f" | {_mib(line['sqlite'])} | {_mib(line['sqlite_high'])}"
    print(
        f"{line['users']:>8,} | {_mib(line['rss'])}{sqlite} | {line['held']:>4} "
        f"| {line['seconds']:7.1f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--users", type=int, default=150_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--database", help="the postgresql:// server (else STM_DATABASE)")
    args = parser.parse_args(argv)
    if args.database:
        os.environ["STM_BENCH_DATABASE"] = args.database
    print(f"{args.store}: {args.users:,} users, one capture and one DM read each, "
          f"cache_max_keys={CACHE_MAX_KEYS}")  # fmt: skip
    if args.store == "sqlite":
        print("   users | RSS (MiB) | SQLite (MiB) | its peak (MiB) | keys held | seconds")
    else:
        print("   users | RSS (MiB) | keys held | seconds")
    try:
        asyncio.run(churn(args.store, args.users, args.every))
    except Skipped as exc:
        print(f"skipped: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
