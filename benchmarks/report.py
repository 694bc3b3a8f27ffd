"""Turn a run's results into the markdown table and the PNG chart (and judge the targets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LABELS = {
    "stm": "discord-stm",
    "stm-restarted": "discord-stm, restarted (rows on disk)",
    "langgraph": "LangGraph + AsyncSqliteSaver",
    "langchain": "LangChain SQLChatMessageHistory (async)",
    "deque": "floor: dict of deques",
    "sqlite3": "floor: sqlite3",
    "stm-tracemalloc": "discord-stm (tracemalloc)",
    "stm-cap": "discord-stm, cache_max_keys = keys / 5",
}


def med(cell: Any) -> float:
    return float(cell["median"]) if isinstance(cell, dict) else float(cell)


def fmt(cell: Any, digits: int = 1) -> str:
    """``median [min-max]``."""
    if not isinstance(cell, dict):
        return f"{cell:,.{digits}f}" if isinstance(cell, float) else str(cell)
    m, lo, hi = cell["median"], cell["min"], cell["max"]
    return f"{m:,.{digits}f} [{lo:,.{digits}f}–{hi:,.{digits}f}]"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def targets(results: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(target, goal, measured, met) for each target that this run measured."""
    out = []
    w1 = results.get("W1", {}).get("stm")
    if w1:
        us, trips = med(w1["us_per_turn"]), med(w1["round_trips_per_turn"])
        out.append(("W1 time per turn", "≤ 20 µs", f"{us:.1f} µs", us <= 20))
        out.append(("W1 round trips per turn", "≤ 0.02", f"{trips:.4f}", trips <= 0.02))
    w2 = results.get("W2", {}).get("stm")
    if w2:
        ups = med(w2["upgrades_per_s"])
        out.append(("W2 durable upgrades/s", "≥ 10,000", f"{ups:,.0f}", ups >= 10_000))
    w3 = results.get("W3", {}).get("stm")
    if w3:
        ratio, p99 = med(w3["open_ratio"]), med(w3["cold_p99_ms"])
        out.append(
            ("W3 open time, 1M rows / empty", "≈ 1 (independent)", f"{ratio:.2f}", ratio <= 2)
        )
        out.append(("W3 first cold build_context p99", "≤ 2 ms", f"{p99:.2f} ms", p99 <= 2))
    w4 = results.get("W4", {}).get("stm")
    if w4:
        worst = max(med(w4[f"{k}_p50_ms"]) for k in ("user", "user_in_server", "channel"))
        out.append(("W4 purge (slowest median)", "≤ 10 ms", f"{worst:.2f} ms", worst <= 10))
        if "user_scrubbed_p50_ms" in w4:
            scrubbed = med(w4["user_scrubbed_p50_ms"])
            out.append(
                ("W4 purge incl. file rewrite", "≤ 10 ms", f"{scrubbed:.0f} ms", scrubbed <= 10)
            )
    w5 = results.get("W5", {})
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


def markdown(report: dict[str, Any]) -> str:
    r = report["results"]
    lines = [
        f"Run of {report['when']}: {report['machine']['cpus']} cores, Python "
        f"{report['machine']['python']}, {'quick sizes' if report['quick'] else 'full sizes'}. "
        "Cells are `median [min–max]` over the repetitions, each in a fresh process.",
        "",
    ]
    if "W1" in r:
        w1, base = r["W1"], med(r["W1"]["stm"]["us_per_turn"]) if "stm" in r["W1"] else None
        first = next(iter(w1.values()))
        lines += [
            f"**W1 chat turns** ({med(first['channels']):,.0f} channels × "
            f"{med(first['turns_per_channel']):,.0f} turns, "
            "record + read back per turn)",
            "",
            _row(
                "system",
                "µs per turn",
                "p99 µs",
                "× discord-stm",
                "DB round trips/turn",
                "wrong windows",
                "reps",
            ),
            _row(*["---"] * 7),
        ]
        for name, cell in w1.items():
            ratio = f"{med(cell['us_per_turn']) / base:,.2f}×" if base else ""
            trips = fmt(cell["round_trips_per_turn"], 4) if "round_trips_per_turn" in cell else ""
            lines.append(
                _row(
                    LABELS[name],
                    fmt(cell["us_per_turn"]),
                    fmt(cell["p99_us"]),
                    ratio,
                    trips,
                    fmt(cell["wrong_windows"], 0),
                    cell["reps"],
                )
            )
        lines.append("")
    if "W2" in r:
        w2 = r["W2"]
        base = med(w2["stm"]["upgrades_per_s"]) if "stm" in w2 else None
        first = next(iter(w2.values()))
        lines += [
            f"**W2 upgrade storm** ({med(first['callers']):,.0f} callers × "
            f"{med(first['per_caller']):,.0f} "
            "upgrades of ~1 KB, acknowledged after a durable commit)",
            "",
            _row("system", "upgrades/s", "upgrades per commit", "discord-stm ×", "reps"),
            _row(*["---"] * 5),
        ]
        for name, cell in w2.items():
            ratio = f"{base / med(cell['upgrades_per_s']):,.2f}×" if base else ""
            lines.append(
                _row(
                    LABELS[name],
                    fmt(cell["upgrades_per_s"], 0),
                    fmt(cell["upgrades_per_commit"]),
                    ratio,
                    cell["reps"],
                )
            )
        lines.append("")
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
    if "W4" in r:
        c = r["W4"]["stm"]
        lines += [
            f"**W4 purge** ({med(c['rows']):,.0f} rows; "
            f"{med(c['purges_each']):,.0f} calls of each kind; "
            "time until the delete is committed; the last row also waits for the file "
            "rewrite that leaves no stale copy of the purged text)",
            "",
            _row("call", "p50 (ms)", "p99 (ms)"),
            _row(*["---"] * 3),
        ]
        for key, label in (
            ("user", "clear_short_term_memory_for_user(user)"),
            ("user_in_server", "clear_short_term_memory_for_user(user, server_id)"),
            ("channel", "clear_short_term_memory_for_channel(channel)"),
            ("user_scrubbed", "clear_short_term_memory_for_user(user) + flush() (VACUUM)"),
        ):
            if f"{key}_p50_ms" not in c:
                continue
            lines.append(_row(f"`{label}`", fmt(c[f"{key}_p50_ms"], 2), fmt(c[f"{key}_p99_ms"], 2)))
        lines.append("")
    if "W5" in r:
        w5 = r["W5"]
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
                    LABELS[name],
                    cell["measure"],
                    fmt(cell["keys_held"], 0),
                    f"{med(cell['bytes_grown']) / 2**20:,.1f}",
                    fmt(cell["mb_per_100k_keys"]),
                    fmt(cell["bytes_per_key_beyond_text"], 0),
                )
            )
        lines.append("")
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
    panels = [w for w in ("W1", "W2", "W3", "W4", "W5") if w in r]
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
        data = r[w]
        if w == "W1":
            names = list(data)
            bars(
                ax,
                [LABELS[n].split(" (")[0] for n in names],
                [data[n]["us_per_turn"] for n in names],
                "W1 chat turn (log)",
                "µs per turn",
            )
            ax.set_yscale("log")
        elif w == "W2":
            names = list(data)
            bars(
                ax,
                [LABELS[n] for n in names],
                [data[n]["upgrades_per_s"] for n in names],
                "W2 durable upgrades",
                "upgrades/s",
            )
        elif w == "W3":
            c = data["stm"]
            bars(
                ax,
                ["open 1M rows", "open empty", "cold p50", "cold p99"],
                [c["open_ms"], c["open_empty_ms"], c["cold_p50_ms"], c["cold_p99_ms"]],
                "W3 restart (discord-stm)",
                "ms",
            )
        elif w == "W4":
            c = data["stm"]
            keys = ("user", "user_in_server", "channel")
            bars(
                ax,
                [f"{k} p50" for k in keys] + [f"{k} p99" for k in keys],
                [c[f"{k}_p50_ms"] for k in keys] + [c[f"{k}_p99_ms"] for k in keys],
                "W4 purge, 1M rows (discord-stm)",
                "ms",
            )
        elif w == "W5":
            # Total growth, not per key: the capped run shows that the cap bounds it.
            names = [n for n in data if n != "stm-tracemalloc"]
            grown = [
                {k: v / 2**20 for k, v in data[n]["bytes_grown"].items()}
                if isinstance(data[n]["bytes_grown"], dict)
                else data[n]["bytes_grown"] / 2**20
                for n in names
            ]
            bars(ax, [LABELS[n] for n in names], grown, "W5 memory, 100k keys created", "MB")
    fig.suptitle(f"discord-stm benchmarks ({report['when']})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict[str, Any], folder: Path) -> str:
    """Write results.md and results.png into ``folder``; return the markdown."""
    text = markdown(report)
    (folder / "results.md").write_text(text + "\n")
    chart(report, folder / "results.png")
    return text
