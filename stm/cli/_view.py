"""What the commands print: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

import click

from .._config import STMConfig
from .._expiry import Expiry
from .._models import PurgeImpact
from .._tables import ago, iso, printable, shorten, table, until
from ..store import is_postgres_url
from ..store._base import PurgePreview, StoredRow, UserHoldings
from ._access import Done, Options

__all__ = [
    "echo_entry",
    "echo_json",
    "echo_pairs",
    "echo_rows",
    "expires_at",
    "impact_json",
    "impact_lines",
    "json_text",
    "opt_out_json",
    "report",
    "row_json",
    "shared_row_json",
]


def json_text(data: object) -> str:
    """``data`` as indented JSON that is safe on a terminal: text stays readable (not
    ASCII-escaped), but every character that is not printable (DEL, the C1 controls
    U+0080-U+009F such as the 8-bit CSI, line and paragraph separators, bidi controls)
    is written as a JSON escape, as json.dumps already writes the C0 controls."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    if text.replace("\n", "").isprintable():
        return text
    # Outside strings json.dumps writes only ASCII punctuation, digits, letters, spaces
    # and newlines: every other character is inside a string, where an escape means it.
    return "".join(ch if ch == "\n" or ch.isprintable() else json.dumps(ch)[1:-1] for ch in text)


def echo_json(data: object) -> None:
    click.echo(json_text(data))


def echo_pairs(pairs: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        click.echo(f"{click.style(name.ljust(width), bold=True)}  {value}")


def echo_rows(title: str, rows: list[StoredRow], config: STMConfig, now: float) -> None:
    click.echo(click.style(f"{title}: {len(rows)}", bold=True))
    if not rows:
        return
    headers = ("KEY", "SERVER", "CHANNEL", "UPDATED", "EXPIRES", "MEMORY")
    cells = [
        [
            printable(row.key),
            "-" if row.server_id is None else str(row.server_id),
            printable(row.channel_name or str(row.channel_id)),
            ago(now - row.updated_at),
            until(expires_at(row, config) - now),
            _memory_text(row),
        ]
        for row in rows
    ]
    fixed = table(headers[:-1], [c[:-1] for c in cells])
    columns = _columns()
    if columns is not None:  # on a terminal, the memory's text is cut to fit its width
        room = max(20, columns - max(len(line) for line in fixed) - 2)
        cells = [[*c[:-1], shorten(c[-1], room)] for c in cells]
    for i, line in enumerate(table(headers, cells)):
        click.echo(click.style(line, bold=True) if i == 0 else line)


def echo_entry(row: StoredRow, config: STMConfig, now: float, shown: list[int]) -> None:
    """One row in full; ``shown``: whose words the prompts of its notes showed directly."""
    expires = expires_at(row, config)
    version = "-" if row.pin is None else f"{row.pin.version} of chain {row.pin.chain}"
    pairs = [
        ("key", printable(row.key)),
        ("scope", printable(row.scope)),
        ("server", _named(row.server_id, row.server_name)),
        ("channel", _named(row.channel_id, row.channel_name)),
        ("private channel", "yes" if row.channel_private else "no"),
        ("persona", "-" if row.persona_id is None else str(row.persona_id)),
        ("updated", f"{iso(row.updated_at)} ({ago(now - row.updated_at)})"),
        ("expires", f"{iso(expires)} ({until(expires - now)})"),
        ("turns since update", str(row.turns_since_refresh)),
        ("notes version", version),
        ("words shown by", ", ".join(str(u) for u in shown) or "-"),
        ("summary", printable(row.summary) if row.summary else "-"),
    ]  # fmt: skip
    pairs += [(f"  {name}", printable(value)) for name, value in sorted(row.categories.items())]
    echo_pairs(pairs)


def _named(ident: int | None, name: str | None) -> str:
    if ident is None:
        return "-"
    return f"{ident} ({printable(name)})" if name else str(ident)


def _memory_text(row: StoredRow) -> str:
    if row.summary:
        return printable(row.summary)
    if row.categories:
        return printable("; ".join(f"{k}: {v}" for k, v in sorted(row.categories.items())))
    return "(recent messages only, not stored)"


def _columns() -> int | None:
    """The terminal's width (``COLUMNS`` first), or None when stdout is not a terminal:
    then nothing is cut, so that a pipe or a file gets every line whole."""
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else None


def shared_row_json(row: StoredRow, config: STMConfig, *, text: bool = False) -> dict[str, Any]:
    """A shared entry the user's words may be in, as a data request shows it: where it is
    and when, not what it says nor whose it is (other people's data), unless ``text``."""
    data: dict[str, Any] = {
        # Another user's own entry: its key and user id are that user's.
        "key": row.key if row.scope == "server" else None,
        "scope": row.scope,
        "server_id": row.server_id,
        "channel_id": row.channel_id,
        "parent_channel_id": row.parent_channel_id,
        "persona_id": row.persona_id,
        "updated_at": iso(row.updated_at),
        "expires_at": iso(expires_at(row, config)),
    }
    if text:
        data["summary"] = row.summary
        data["categories"] = dict(row.categories)
    return data


def row_json(
    row: StoredRow, config: STMConfig, *, contributors: list[int] | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": row.key,
        "scope": row.scope,
        "server_id": row.server_id,
        "server_name": row.server_name,
        "channel_id": row.channel_id,
        "channel_name": row.channel_name,
        "parent_channel_id": row.parent_channel_id,
        "channel_private": row.channel_private,
        "persona_id": row.persona_id,
        "user_id": row.user_id,
        "summary": row.summary,
        "categories": dict(row.categories),
        "turns_since_refresh": row.turns_since_refresh,
        "last_refreshed_turn": row.last_refreshed_turn,
        "updated_at": iso(row.updated_at),
        "expires_at": iso(expires_at(row, config)),
    }
    if contributors is not None:
        # Not in exports: the other contributors are other people's data.
        data["contributors"] = contributors
    return data


def opt_out_json(holdings: UserHoldings) -> dict[str, Any]:
    since = holdings.opted_out_since
    return {"opted_out": since is not None, "since": None if since is None else iso(since)}


def report(opts: Options, data: dict[str, Any], remaining: int, done: Done, text: str) -> None:
    """Say what a purge did, once durable; a row written since (by a running bot) is named."""
    if opts.as_json:
        echo_json({**data, "durable": True, "entries_now": remaining, **done.json()})
        return
    # On SQLite the library also erases what the delete left in the file before it answers.
    erased = "durable" if is_postgres_url(opts.config.database) else "durable, erased from the file"
    click.echo(f"{text}; {erased} ({done.text()})")
    if remaining:
        click.echo(f"{remaining} entries were written again since (new activity)")


def _by_server(impact: PurgePreview | PurgeImpact) -> list[tuple[int | None, int, int | None]]:
    """(server, shared entries cleared, distilled entries held) per server; DMs last."""
    found = sorted(impact.shared_by_server.items(), key=lambda i: (i[0] is None, i[0] or 0))
    return [(s, n, None if s is None else impact.distilled_by_server.get(s)) for s, n in found]


def impact_json(impact: PurgePreview | PurgeImpact, erasure: str) -> dict[str, Any]:
    """What a purge erases (or would): the user's own entries, the shared entries whose
    notes it clears, and per server their number out of the server's distilled entries."""
    return {
        "erasure": erasure,
        "own": impact.own,
        "shared": impact.shared,
        "by_server": [
            {
                "server_id": server,
                "shared": shared,
                "distilled": distilled,
                "share": round(shared / distilled, 4) if distilled else None,
                # Counted only up to a bound: the server holds at least "distilled", and
                # "share" is the most the purge clears.
                "at_least": server in impact.distilled_at_least,
            }
            for server, shared, distilled in _by_server(impact)
        ],
    }


def impact_lines(impact: PurgePreview | PurgeImpact, erasure: str) -> list[str]:
    """The same, for people: one line per kind, one per server."""
    lines = [
        f"  the user's own entries: {impact.own}",
        f"  shared entries whose notes are cleared, as they may hold the user's words "
        f"(erasure policy {erasure}): {impact.shared}",
    ]
    for server, shared, distilled in _by_server(impact):
        if server is None:
            lines.append(f"    in DMs: {shared}")
        elif distilled and server in impact.distilled_at_least:
            lines.append(
                f"    server {server}: {shared} of at least {distilled} distilled entries "
                f"(at most {shared / distilled:.0%})"
            )
        elif distilled:
            lines.append(
                f"    server {server}: {shared} of its {distilled} distilled entries "
                f"({shared / distilled:.0%})"
            )
        else:
            lines.append(f"    server {server}: {shared}")
    lines.append("  and the user's recent messages, held only by running bots")
    return lines


def expires_at(row: StoredRow, config: STMConfig) -> float:
    """When the row expires if untouched (the library's one expiry rule)."""
    expiry = Expiry.hours(config.crude_ttl_hours, config.summary_ttl_hours)
    return expiry.expires_at(row.updated_at, bool(row.summary) or bool(row.categories))
