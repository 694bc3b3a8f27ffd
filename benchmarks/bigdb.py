"""Short-term memory databases of 100k to 3M durable rows, each built once and cached.

Built with sqlite3 directly against the library's own migrations (rows streamed
in without a journal, indexes created after the bulk insert, as a restore
would), so W3 and W4 measure the real schema: about 10 s per million rows. Each
file is cached under ``benchmarks/results/`` and rebuilt when the schema or the
size changes. A million rows is 1,000 servers of 500 channels and 100,000 users
in 5 channels each; other sizes scale both.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .common import RESULTS, bare_schema, credit, text

SERVERS = 1000
CHANNELS_PER_SERVER = 500  # 500,000 server-scoped rows
USERS = 100_000
CHANNELS_PER_USER = 5  # 500,000 user-scoped rows
SUMMARY_EVERY = 5  # one row in five holds a ~200-character summary and its contributor


@dataclass(frozen=True)
class Layout:
    """Where rows are, so workloads can pick existing users, channels and keys."""

    now: float
    servers: int
    users: int

    @staticmethod
    def channel(server: int, n: int) -> int:
        return server * 10_000 + n

    @property
    def rows(self) -> int:
        return self.servers * CHANNELS_PER_SERVER + self.users * CHANNELS_PER_USER

    def user_server(self, user: int) -> int:
        return 1 + user % self.servers

    def user_channel(self, user: int, n: int) -> int:
        # A user speaks in the first channels of their server, where many others speak too.
        return self.channel(self.user_server(user), (user // self.servers + n) % 50)


def _migration() -> tuple[str, int]:
    """What the cached file depends on: the library's schema, and its version."""
    from stm.store._sqlite import MIGRATIONS

    return "".join(MIGRATIONS), len(MIGRATIONS)


def path(rows_wanted: int = 1_000_000) -> Path:
    """The cached file's name: it changes whenever the schema does."""
    schema, _ = _migration()
    digest = hashlib.sha1((schema + str(rows_wanted)).encode()).hexdigest()
    return RESULTS / f"bigdb-{rows_wanted}-{digest[:10]}.sqlite3"


def build(target: Path, scale: float = 1.0) -> None:
    """Write the database: ``scale`` times a million rows."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    db = sqlite3.connect(partial, isolation_level=None)
    rng = random.Random(5)
    now = time.time()
    servers = max(1, int(SERVERS * scale))
    users = max(1, int(USERS * scale))
    layout = Layout(now, servers, users)
    summaries = [text(f"sum{i}", 200) for i in range(1000)]
    try:
        # A half-built file is thrown away, so the build needs no journal and no syncs.
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -262144")  # 256 MiB: index builds sort in memory
        indexes = bare_schema(db)
        db.execute("BEGIN")
        insert = (
            "INSERT INTO short_term_memories (id, key, scope, server_id, user_id, channel_id, "
            "channel_name, summary, turns_since_refresh, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
        )
        contributors: list[tuple[int, int]] = []

        def rows() -> Iterator[tuple[object, ...]]:
            # Streamed into executemany: three million tuples need not exist at once.
            row_id = 0
            for server in range(1, servers + 1):
                for n in range(CHANNELS_PER_SERVER):
                    row_id += 1
                    channel = Layout.channel(server, n)
                    summary = None
                    if row_id % SUMMARY_EVERY == 0:
                        summary = summaries[row_id % 1000]
                        contributors.append((1 + rng.randrange(users), row_id))
                    yield (
                        row_id, f"shortterm:server:{server}:{channel}", "server", server, None,
                        channel, f"chan-{n}", summary, rng.randrange(5),
                        now - rng.uniform(0, 3600),
                    )  # fmt: skip
            for user in range(1, users + 1):
                server = layout.user_server(user)
                for n in range(CHANNELS_PER_USER):
                    row_id += 1
                    channel = layout.user_channel(user, n)
                    summary = None
                    if row_id % SUMMARY_EVERY == 0:
                        summary = summaries[row_id % 1000]
                        contributors.append((user, row_id))
                    yield (
                        row_id, f"shortterm:user:{user}:{channel}", "user", server, user, channel,
                        None, summary, rng.randrange(5), now - rng.uniform(0, 3600),
                    )  # fmt: skip

        db.executemany(insert, rows())
        credit(db, contributors)
        for statement in indexes:
            db.execute(statement)
        db.execute("COMMIT")
        db.execute("PRAGMA journal_mode = WAL")  # what the library opens it in
    finally:
        db.close()
    partial.rename(target)
    (target.parent / (target.name + ".meta")).write_text(f"{now}\n{servers}\n{users}\n")


def ensure(rows: int = 1_000_000) -> tuple[Path, Layout]:
    """The cached file of about ``rows`` rows (built if missing) and its layout."""
    target = path(rows)
    if not target.exists():
        build(target, scale=rows / 1_000_000)
    now, servers, users = (target.parent / (target.name + ".meta")).read_text().split()
    return target, Layout(float(now), int(servers), int(users))


def copy(source: Path, folder: Path) -> Path:
    """A private copy to open and change (purges must not alter the cached file)."""
    target = folder / "stm.sqlite3"
    shutil.copyfile(source, target)
    # Write the copy out now: otherwise the first commit's fsync pays for the whole file.
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
    return target


def warm(file: Path) -> None:
    """Read ``file`` into the OS page cache, as a running bot's database would be."""
    with open(file, "rb") as f:
        while f.read(1 << 24):
            pass
