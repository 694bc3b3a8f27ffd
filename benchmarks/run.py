"""Run every workload, each system in its own fresh process, and write the report.

    python -m benchmarks.run                 # the full run (about 12 minutes on 2 cores)
    python -m benchmarks.run --quick         # small sizes, a smoke test of the suite
    python -m benchmarks.run --only W1,W3 --reps 3
    python -m benchmarks.run --database postgresql://postgres@127.0.0.1:5432/postgres
    python -m benchmarks.run --only W6 --database postgresql://...   # realistic servers

Writes ``results.json``, ``results.md`` and ``results.png`` to
``benchmarks/results/`` (or ``--out``). Figures are medians over the
repetitions with their min-max spread; ratios compare medians of one run.
The PostgreSQL rows run against scratch databases created on the server that
``--database`` (or ``STM_DATABASE``) names; without one they are reported as
skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import RESULTS
from .w6_server import SYSTEMS as W6_SYSTEMS

ROOT = Path(__file__).resolve().parent.parent

# Each workload and the systems measured in it, in the order of the report.
PLAN: list[tuple[str, list[str]]] = [
    (
        "W1",
        ["stm", "stm-restarted", "stm-postgresql", "langgraph", "langchain", "deque", "sqlite3"],
    ),
    (
        "W2",
        [
            "stm",
            "stm-2proc",
            "stm-postgresql",
            "stm-postgresql-2proc",
            "sqlite3-group",
            "sqlite3-per-row",
        ],
    ),
    ("W3", ["stm"]),
    ("W4", ["stm-small", "stm-medium", "stm-large", "stm-postgresql"]),
    ("W5", ["stm", "stm-tracemalloc", "stm-cap", "deque"]),
    ("W6", list(W6_SYSTEMS)),
]
# Peers are slow (milliseconds per turn), purges at millions of rows take seconds, and
# memory readings barely vary: fewer repetitions keep the run short.
SLOW = {
    ("W1", "langgraph"),
    ("W1", "langchain"),
    *(("W4", s) for s in dict(PLAN)["W4"]),
    *(("W5", s) for s in dict(PLAN)["W5"]),
}
# A W6 run is a whole simulation with its own checkpoints and purges: one each.
ONCE = {"W6"}


_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def run_one(workload: str, system: str, quick: bool) -> dict[str, Any]:
    """One repetition in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "benchmarks.worker", workload, system]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        missing = _MISSING.search(done.stderr)
        if missing and not system.startswith("stm"):  # the library's own rows never skip
            # A peer (or the chart) comes with the benchmark extras: its rows are skipped,
            # as PostgreSQL's are without a server, rather than the run lost.
            return {"skipped": f"needs {missing[1]}: pip install -e '.[dev,bench]'"}
        raise RuntimeError(f"{workload} {system} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def aggregate(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of every numeric metric over the repetitions."""
    out: dict[str, Any] = {"reps": len(reps)}
    for name, first in reps[0].items():
        values = [r[name] for r in reps]
        if isinstance(first, bool) or not isinstance(first, int | float) or len(reps) == 1:
            out[name] = first
            continue
        out[name] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of fast systems")
    parser.add_argument("--slow-reps", type=int, default=3, help="repetitions of slow peers")
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W3")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--database",
        default="",
        help="a postgresql:// server for the PostgreSQL rows (default: $STM_DATABASE if one)",
    )
    args = parser.parse_args(argv)
    only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    if args.database:
        os.environ["STM_BENCH_DATABASE"] = args.database

    results: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()  # the machine may be shared: the report says how busy
    started = time.time()
    for workload, systems in PLAN:
        if only and workload not in only:
            continue
        results[workload] = {}
        for system in systems:
            count = args.slow_reps if (workload, system) in SLOW else args.reps
            if workload in ONCE:
                count = 1
            reps = []
            for i in range(count):
                print(f"{workload} {system} rep {i + 1}/{count}", file=sys.stderr, flush=True)
                reps.append(run_one(workload, system, args.quick))
                if "skipped" in reps[-1]:
                    print(f"  skipped: {reps[-1]['skipped']}", file=sys.stderr, flush=True)
                    break
            results[workload][system] = aggregate(reps)
    load_after = os.getloadavg()
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "seconds": round(time.time() - started, 1),
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after],
        },
        "results": results,
    }
    from .report import write_report

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = write_report(report, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
