"""Turn a run's results into the markdown table and the PNG chart (and judge the targets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LABELS = {
    ("W1", "stm"): "discord-stm",
    ("W1", "stm-restarted"): "discord-stm, restarted (rows on disk)",
    ("W1", "stm-postgresql"): "discord-stm on PostgreSQL",
    ("W1", "langgraph"): "LangGraph + AsyncSqliteSaver",
    ("W1", "langchain"): "LangChain SQLChatMessageHistory (async)",
    ("W1", "deque"): "floor: dict of deques",
    ("W1", "sqlite3"): "floor: sqlite3, a WAL transaction per turn",
    ("W2", "stm"): "discord-stm",
    ("W2", "stm-2proc"): "discord-stm, two processes on one file",
    ("W2", "stm-postgresql"): "discord-stm on PostgreSQL",
    ("W2", "stm-postgresql-2proc"): "discord-stm on PostgreSQL, two processes",
    ("W2", "sqlite3-group"): "floor: sqlite3 group commit",
    ("W2", "sqlite3-per-row"): "old floor: sqlite3, one transaction per upgrade (no group commit)",
    ("W4", "stm-postgresql"): "discord-stm on PostgreSQL",
    ("W5", "stm"): "discord-stm",
    ("W5", "stm-tracemalloc"): "discord-stm (tracemalloc)",
    ("W5", "stm-cap"): "discord-stm, cache_max_keys = keys / 5",
    ("W5", "deque"): "floor: dict of deques, same fields",
}


def label(workload: str, system: str, cell: dict[str, Any] | None = None) -> str:
    if workload == "W4" and cell is not None and system != "stm-postgresql":
        return f"discord-stm, {med(cell['rows']):,.0f} rows"
    return LABELS.get((workload, system), system)


def med(cell: Any) -> float:
    return float(cell["median"]) if isinstance(cell, dict) else float(cell)


def fmt(cell: Any, digits: int = 1) -> str:
    """``median [min-max]``."""
    if isinstance(cell, bool) or not isinstance(cell, dict | int | float):
        return str(cell)
    if not isinstance(cell, dict):
        return f"{cell:,.{digits}f}"
    m, lo, hi = cell["median"], cell["min"], cell["max"]
    return f"{m:,.{digits}f} [{lo:,.{digits}f}–{hi:,.{digits}f}]"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def ran(cells: dict[str, Any]) -> dict[str, Any]:
    """The systems of a workload that ran (not skipped)."""
    return {name: cell for name, cell in cells.items() if "skipped" not in cell}


def skip_notes(workload: str, cells: dict[str, Any]) -> list[str]:
    notes = [
        f"- {label(workload, name)}: skipped ({cell['skipped']})"
        for name, cell in cells.items()
        if "skipped" in cell
    ]
    return [*notes, ""] if notes else []


def sizes(report: dict[str, Any]) -> list[str]:
    """The sizes each workload actually ran at, read from its results."""
    r, out = report["results"], []
    if (w1 := ran(r.get("W1", {}))) and (c := next(iter(w1.values()))):
        out.append(
            f"W1 {med(c['channels']):,.0f} channels × {med(c['turns_per_channel']):,.0f} turns"
        )
    if (w2 := ran(r.get("W2", {}))) and (c := next(iter(w2.values()))):
        out.append(f"W2 {med(c['callers']):,.0f} callers × {med(c['per_caller']):,.0f} upgrades")
    if "W3" in r:
        c = r["W3"]["stm"]
        out.append(f"W3 {med(c['rows']):,.0f} rows, {med(c['samples']):,.0f} cold keys")
    if w4 := ran(r.get("W4", {})):
        rows = ", ".join(f"{med(c['rows']):,.0f}" for c in w4.values())
        out.append(f"W4 {rows} rows")
    if (w5 := ran(r.get("W5", {}))) and (c := next(iter(w5.values()))):
        out.append(f"W5 {med(c['keys_created']):,.0f} keys")
    if w6 := ran(r.get("W6", {})):
        users = sorted({c["users"] for c in w6.values() if "users" in c})
        turns = sorted({p["turns"] for c in w6.values() for p in c.get("checkpoints", [])})
        swept = sorted({c["members"] for c in w6.values() if "checkpoints" not in c})
        out.append(
            f"W6 {', '.join(f'{u:,}' for u in users)} members to "
            f"{max(turns, default=0):,} turns, membership {', '.join(f'{m:,}' for m in swept)}"
        )
    return out


def _largest(w4: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    sqlite = {n: c for n, c in ran(w4).items() if n != "stm-postgresql"}
    if not sqlite:
        return None
    return max(sqlite.items(), key=lambda item: med(item[1]["rows"]))


def targets(results: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(target, goal, measured, met) for each target that this run measured."""
    out = []
    w1 = ran(results.get("W1", {}))
    if "stm" in w1 and "sqlite3" in w1:
        ours, floor = w1["stm"], w1["sqlite3"]
        p50 = med(ours["p50_us"]) / med(floor["p50_us"])
        out.append(("W1 p50 per turn / sqlite3 floor p50", "≤ 0.5", f"{p50:.2f}", p50 <= 0.5))
        mean = med(ours["mean_us"]) / med(floor["mean_us"])
        out.append(("W1 mean per turn / sqlite3 floor mean", "≤ 1", f"{mean:.2f}", mean <= 1))
        p99 = med(ours["p99_us"]) / med(floor["p99_us"])
        out.append(("W1 p99 per turn / sqlite3 floor p99", "≤ 1", f"{p99:.2f}", p99 <= 1))
    if "stm" in w1:
        trips = med(w1["stm"]["round_trips_per_turn"])
        out.append(("W1 round trips per turn", "≤ 0.02", f"{trips:.4f}", trips <= 0.02))
    w2 = ran(results.get("W2", {}))
    if "stm" in w2 and "sqlite3-group" in w2:
        ratio = med(w2["stm"]["upgrades_per_s"]) / med(w2["sqlite3-group"]["upgrades_per_s"])
        out.append(
            ("W2 upgrades/s / sqlite3 group-commit floor", "≥ 0.5", f"{ratio:.2f}", ratio >= 0.5)
        )
    w3 = results.get("W3", {}).get("stm")
    if w3:
        ratio, p99 = med(w3["open_ratio"]), med(w3["cold_p99_ms"])
        out.append(
            ("W3 open time, all rows / empty", "≈ 1 (independent)", f"{ratio:.2f}", ratio <= 2)
        )
        out.append(("W3 first cold build_context p99", "≤ 2 ms", f"{p99:.2f} ms", p99 <= 2))
    w4 = results.get("W4", {})
    largest = _largest(w4)
    if largest:
        _, c = largest
        rows = f"{med(c['rows']):,.0f} rows"
        worst = max(med(c[f"{k}_p50_ms"]) for k in ("user", "user_in_server", "channel"))
        out.append(
            (f"W4 durable delete, slowest median, {rows}", "≤ 10 ms", f"{worst:.2f} ms",
             worst <= 10)
        )  # fmt: skip
        stall = med(c["stall_max_ms"])
        out.append(
            (f"W4 longest upgrade stall during a purge, {rows}", "≤ 50 ms", f"{stall:,.0f} ms",
             stall <= 50)
        )  # fmt: skip
    w5 = ran(results.get("W5", {}))
    if "stm" in w5:
        extra = med(w5["stm"]["bytes_per_key_beyond_text"])
        out.append(
            ("W5 bytes per key beyond text (RSS)", "≤ 1,536", f"{extra:,.0f}", extra <= 1536)
        )
    if "stm-cap" in w5:
        held = med(w5["stm-cap"]["keys_held"])
        created = med(w5["stm-cap"]["keys_created"])
        out.append(
            (
                "W5 cap bounds memory",
                "keys held ≤ cap",
                f"{held:,.0f} of {created:,.0f} held",
                held <= created / 5,
            )
        )
    return out


def _w1(w1: dict[str, Any]) -> list[str]:
    cells = ran(w1)
    first = next(iter(cells.values()))
    base = cells.get("stm")
    lines = [
        f"**W1 chat turns** ({med(first['channels']):,.0f} channels × "
        f"{med(first['turns_per_channel']):,.0f} turns; per turn, inputs built inside the "
        "clock, record + read back; ratios are this row's figure over discord-stm's)",
        "",
        _row(
            "system", "p50 µs", "mean µs", "p99 µs", "× discord-stm (p50)",
            "× discord-stm (mean)", "DB round trips/turn", "wrong windows", "reps",
        ),
        _row(*["---"] * 9),
    ]  # fmt: skip
    for name, cell in cells.items():
        by_p50 = f"{med(cell['p50_us']) / med(base['p50_us']):,.2f}×" if base else ""
        by_mean = f"{med(cell['mean_us']) / med(base['mean_us']):,.2f}×" if base else ""
        trips = fmt(cell["round_trips_per_turn"], 4) if "round_trips_per_turn" in cell else ""
        lines.append(
            _row(
                label("W1", name), fmt(cell["p50_us"]), fmt(cell["mean_us"]),
                fmt(cell["p99_us"]), by_p50, by_mean, trips, fmt(cell["wrong_windows"], 0),
                cell["reps"],
            )
        )  # fmt: skip
    return [*lines, "", *skip_notes("W1", w1)]


def _w2(w2: dict[str, Any]) -> list[str]:
    cells = ran(w2)
    first = next(iter(cells.values()))
    floor = cells.get("sqlite3-group")
    lines = [
        f"**W2 upgrade storm** ({med(first['callers']):,.0f} callers × "
        f"{med(first['per_caller']):,.0f} upgrades of ~1 KB, each acknowledged after a "
        "durable commit; two rows per upgrade)",
        "",
        _row(
            "system", "upgrades/s", "upgrades per commit", "× group-commit floor",
            "wrong rows", "reps",
        ),
        _row(*["---"] * 6),
    ]  # fmt: skip
    for name, cell in cells.items():
        ratio = (
            f"{med(cell['upgrades_per_s']) / med(floor['upgrades_per_s']):,.2f}×" if floor else ""
        )
        lines.append(
            _row(
                label("W2", name), fmt(cell["upgrades_per_s"], 0),
                fmt(cell["upgrades_per_commit"]), ratio, fmt(cell.get("wrong_rows", 0), 0),
                cell["reps"],
            )
        )  # fmt: skip
    return [*lines, "", *skip_notes("W2", w2)]


def _w4(w4: dict[str, Any]) -> list[str]:
    cells = ran(w4)
    lines = [
        "**W4 purge** (durable delete: time until the delete is committed and the WAL "
        "checkpointed, medians of each kind; purge + flush: `clear_short_term_memory_for_user` "
        "then `flush()`, which waits for the erasure of the text on disk; stall: the longest "
        "upgrade that overlapped a purge + flush, with 20 upgraders running)",
        "",
        _row(
            "system", "user purge p50 (ms)", "user-in-server p50 (ms)", "channel clear p50 (ms)",
            "purge + flush p50 (ms)", "longest stall (ms)", "undisturbed upgrade p50 / p99 (ms)",
            "reps",
        ),
        _row(*["---"] * 8),
    ]  # fmt: skip
    for name, c in cells.items():
        lines.append(
            _row(
                label("W4", name, c), fmt(c["user_p50_ms"], 2), fmt(c["user_in_server_p50_ms"], 2),
                fmt(c["channel_p50_ms"], 2), fmt(c["purge_flush_p50_ms"], 0),
                fmt(c["stall_max_ms"], 0),
                f"{med(c['upgrade_p50_ms']):.1f} / {med(c['upgrade_p99_ms']):.1f}", c["reps"],
            )
        )  # fmt: skip
    return [*lines, "", *skip_notes("W4", w4)]


def markdown(report: dict[str, Any]) -> str:
    r = report["results"]
    machine = report["machine"]
    load = ""
    if "load_before" in machine:
        load = (
            f" Load average (1, 5, 15 min) {', '.join(map(str, machine['load_before']))} at "
            f"the start, {', '.join(map(str, machine['load_after']))} at the end."
        )
    lines = [
        f"Run of {report['when']}: {machine['cpus']} cores, Python {machine['python']}, "
        f"{'quick' if report['quick'] else 'full'} sizes ({'; '.join(sizes(report))}), "
        f"{report['seconds'] / 60:.1f} minutes.{load} Cells are `median [min–max]` over the "
        "repetitions, each in a fresh process.",
        "",
    ]
    if ran(r.get("W1", {})):
        lines += _w1(r["W1"])
    if ran(r.get("W2", {})):
        lines += _w2(r["W2"])
    if "W3" in r:
        c = r["W3"]["stm"]
        lines += [
            f"**W3 restart** ({med(c['rows']):,.0f} durable rows; "
            f"{med(c['samples']):,.0f} cold keys)",
            "",
            _row(
                "open, all rows (ms)",
                "open, empty (ms)",
                "ratio",
                "first build_context p50 (ms)",
                "p99 (ms)",
                "round trips per cold key",
            ),
            _row(*["---"] * 6),
            _row(
                fmt(c["open_ms"], 2),
                fmt(c["open_empty_ms"], 2),
                fmt(c["open_ratio"], 2),
                fmt(c["cold_p50_ms"], 3),
                fmt(c["cold_p99_ms"], 3),
                fmt(c["round_trips_per_cold_key"], 2),
            ),
            "",
        ]
    if ran(r.get("W4", {})):
        lines += _w4(r["W4"])
    if w5 := ran(r.get("W5", {})):
        first = next(iter(w5.values()))
        lines += [
            f"**W5 memory** ({med(first['keys_created']):,.0f} keys, full windows of 10 messages)",
            "",
            _row(
                "system",
                "measured by",
                "keys held",
                "MB grown",
                "MB per 100k keys held",
                "bytes per key beyond text",
            ),
            _row(*["---"] * 6),
        ]
        for name, cell in w5.items():
            lines.append(
                _row(
                    label("W5", name),
                    cell["measure"],
                    fmt(cell["keys_held"], 0),
                    f"{med(cell['bytes_grown']) / 2**20:,.1f}",
                    fmt(cell["mb_per_100k_keys"]),
                    fmt(cell["bytes_per_key_beyond_text"], 0),
                )
            )
        lines.append("")
    if w6 := ran(r.get("W6", {})):
        from .w6_server import tables

        lines += [*tables(list(w6.values())), *skip_notes("W6", r["W6"])]
    checks = targets(r)
    if checks:
        lines += ["**Targets**", "", _row("target", "goal", "measured", "met"), _row(*["---"] * 4)]
        lines += [_row(t, g, m, "yes" if ok else "**no**") for t, g, m, ok in checks]
        lines.append("")
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    """One figure, a panel per workload, medians with min-max error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = report["results"]
    panels = [w for w in ("W1", "W2", "W3", "W4", "W5") if ran(r.get(w, {}))]
    if not panels:  # W6 alone: its results are tables only
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)

    def bars(ax: Any, names: list[str], cells: list[Any], title: str, unit: str) -> None:
        mids = [med(c) for c in cells]
        lo = [
            m - (c["min"] if isinstance(c, dict) else m) for m, c in zip(mids, cells, strict=True)
        ]
        hi = [
            (c["max"] if isinstance(c, dict) else m) - m for m, c in zip(mids, cells, strict=True)
        ]
        ours = title.endswith("(discord-stm)")
        colors = ["#d62728" if ours or n.startswith("discord-stm") else "#7f7f7f" for n in names]
        ax.bar(range(len(names)), mids, yerr=[lo, hi], color=colors, capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)

    for ax, w in zip(axes[0], panels, strict=True):
        data = ran(r[w])
        names = list(data)
        if w == "W1":
            bars(
                ax,
                [label(w, n).split(" (")[0].split(", a ")[0] for n in names],
                [data[n]["p50_us"] for n in names],
                "W1 chat turn, p50 (log)",
                "µs per turn",
            )
            ax.set_yscale("log")
        elif w == "W2":
            bars(
                ax,
                [label(w, n).split(" (")[0] for n in names],
                [data[n]["upgrades_per_s"] for n in names],
                "W2 durable upgrades",
                "upgrades/s",
            )
        elif w == "W3":
            c = data["stm"]
            bars(
                ax,
                [f"open {med(c['rows']):,.0f} rows", "open empty", "cold p50", "cold p99"],
                [c["open_ms"], c["open_empty_ms"], c["cold_p50_ms"], c["cold_p99_ms"]],
                "W3 restart (discord-stm)",
                "ms",
            )
        elif w == "W4":
            bars(
                ax,
                [label(w, n, data[n]).removeprefix("discord-stm, ") for n in names],
                [data[n]["stall_max_ms"] for n in names],
                "W4 longest upgrade stall during a purge (discord-stm)",
                "ms",
            )
        elif w == "W5":
            # Total growth, not per key: the capped run shows that the cap bounds it.
            names = [n for n in names if n != "stm-tracemalloc"]
            grown = [
                {k: v / 2**20 for k, v in data[n]["bytes_grown"].items()}
                if isinstance(data[n]["bytes_grown"], dict)
                else data[n]["bytes_grown"] / 2**20
                for n in names
            ]
            created = med(next(iter(data.values()))["keys_created"])
            bars(
                ax,
                [label(w, n) for n in names],
                grown,
                f"W5 memory, {created:,.0f} keys created",
                "MB",
            )
    fig.suptitle(f"discord-stm benchmarks ({report['when']})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict[str, Any], folder: Path) -> str:
    """Write results.md and results.png into ``folder``; return the markdown."""
    text = markdown(report)
    (folder / "results.md").write_text(text + "\n")
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        # The results are written; only the picture needs the benchmark extras.
        print("results.png not drawn: matplotlib is missing (pip install -e '.[dev,bench]')")
    else:
        chart(report, folder / "results.png")
    return text
