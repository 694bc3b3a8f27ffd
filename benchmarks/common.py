"""Helpers shared by the workloads: deterministic text, timing, memory readings."""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


class Stopwatch:
    """perf_counter seconds as a context manager: ``with Stopwatch() as sw: ...``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
