"""Helpers shared by the workloads: deterministic text, timing, memory readings."""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


def text(tag: str, length: int) -> str:
    """A message of exactly ``length`` characters that starts with ``tag`` (so each is unique)."""
    out = [tag]
    size = len(tag)
    i = len(tag)
    while size < length:
        word = _WORDS[i % len(_WORDS)]
        out.append(word)
        size += len(word) + 1
        i += 7
    return " ".join(out)[:length]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank: what a latency table means by p99."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rss_bytes() -> int:
    """The resident set size of this process now (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def settle() -> None:
    """Collect garbage so memory readings do not count what is already unreachable."""
    for _ in range(3):
        gc.collect()


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary folder on the same disk as the results (not tmpfs), removed afterwards."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=RESULTS, prefix="scratch-") as path:
        yield Path(path)


class LargestFile:
    """The largest size a file reaches, sampled every ``every`` seconds on a thread of its
    own (a busy event loop would sample it late): ``with LargestFile(path) as f: ...``,
    then ``f.largest``, or ``f.take()`` for the largest since the previous ``take``
    (``start`` and ``stop`` where a block does not fit).
    A file that does not exist counts as empty. An SQLite WAL is one such file."""

    def __init__(self, path: str | Path, every: float = 0.002) -> None:
        self.path, self.every = str(path), every
        self.largest = self._since = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while True:
            try:
                size = os.stat(self.path).st_size
            except OSError:
                size = 0
            self.largest, self._since = max(self.largest, size), max(self._since, size)
            if self._stop.wait(self.every):
                return

    def take(self) -> int:
        """The largest size seen since the previous call (or the start)."""
        since, self._since = self._since, 0
        return since

    def start(self) -> None:
        """Sample until ``stop`` (again after each ``start``)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="largest-file", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LargestFile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Stopwatch:
    """perf_counter seconds as a context manager: ``with Stopwatch() as sw: ...``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def credit(db: Any, credits: list[tuple[int, int]]) -> None:
    """Record, in a database being built for a benchmark, that each ``(user, row id)``
    row's notes hold that user's words: as a contributor row (schemas before chains of
    versions) or as the first version of a chain of its own with the user as its member,
    which is how the library migrates contributor rows."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    if "short_term_memory_contributors" in tables:
        db.executemany(
            "INSERT OR IGNORE INTO short_term_memory_contributors (user_id, memory_id) "
            "VALUES (?, ?)",
            credits,
        )
        return
    rows = sorted({row_id for _, row_id in credits})
    db.executemany(
        "INSERT INTO stm_chains (id, live_key, server_id, head) "
        "SELECT id, key, server_id, 1 FROM short_term_memories WHERE id = ?",
        [(row_id,) for row_id in rows],
    )
    db.executemany(
        "UPDATE short_term_memories SET chain_id = id, chain_version = 1 WHERE id = ?",
        [(row_id,) for row_id in rows],
    )
    db.executemany(
        "INSERT OR IGNORE INTO stm_chain_members (member, chain_id, first) VALUES (?, ?, 1)",
        credits,
    )
    db.execute(  # each membership's server, as the library writes it
        "UPDATE stm_chain_members SET server_id = "
        "(SELECT c.server_id FROM stm_chains c WHERE c.id = stm_chain_members.chain_id)"
    )


def bare_schema(db: Any) -> list[str]:
    """Give the empty database ``db`` the library's schema (its own migrations) without its
    indexes and triggers, for a fast bulk load; returns the statements that make them again
    once the rows are in."""
    from stm.store._sqlite import migrate

    migrate(db)
    later = [
        sql
        for (sql,) in db.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('index', 'trigger') "
            "AND sql IS NOT NULL ORDER BY type = 'trigger'"
        )
    ]
    for kind, name in db.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('index', 'trigger') "
        "AND sql IS NOT NULL"
    ).fetchall():
        db.execute(f"DROP {kind.upper()} {name}")
    return later
