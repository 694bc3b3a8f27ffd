"""The operator's command line: ``python -m stm`` (installed as ``discord-stm``).

Reads (``stats``, ``show``, ``export``, ``check``, ``janitor --dry-run``) open the
database read-only and never create or migrate it. Purges and the janitor go through
``ShortTermMemory``, so they have the library's semantics (shared summaries a purged
user contributed to are dropped too, the file is rewritten so no copy of the text
survives), and are reported done only once ``flush()`` says they are durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .cache import HOUR
from .config import STMConfig
from .convert import entry_from
from .errors import DurabilityError, STMError
from .keys import parse_key
from .memory import ShortTermMemory
from .metrics import MetricsSnapshot
from .store.base import StoredRow
from .store.inspect import UserHoldings
from .store.sqlite import SQLiteStore
from .tables import ago, human_bytes, iso, printable, shorten, table, until

__all__ = ["cli", "main"]

log = logging.getLogger("stm.cli")
_T = TypeVar("_T")

# Discord ids are unsigned 64-bit snowflakes; SQLite stores signed 64-bit integers.
ID = click.IntRange(0, 2**63 - 1)
# Tries of a purge's flush before the command gives up (the library keeps nothing
# queued once this process exits, so the error says what is not durable).
FLUSH_ATTEMPTS = 3


class CommandError(click.ClickException):
    """An error the operator can act on: one line, exit status 1."""


@dataclass
class _Options:
    database: str | None
    as_json: bool
    _config: STMConfig | None = None

    @property
    def config(self) -> STMConfig:
        """The ``STM_*`` settings, with ``--database`` over ``STM_DATABASE``."""
        if self._config is None:
            overrides = {} if self.database is None else {"database": self.database}
            self._config = STMConfig(**overrides)
        return self._config

    @property
    def path(self) -> str:
        database = self.config.database
        if database.startswith(("postgresql://", "postgres://")):
            raise CommandError("PostgreSQL databases are not supported by this version")
        return database


# -- the command group ----------------------------------------------------------------
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database",
    metavar="PATH",
    help="The database (default: STM_DATABASE, else data/stm.sqlite3). Never created.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option(
    "-v", "--verbose", count=True, help="Log to stderr: -v for info, -vv for debug (may show text)."
)
@click.pass_context
def cli(ctx: click.Context, database: str | None, as_json: bool, verbose: int) -> None:
    """Inspect and manage the short-term memory of a bot, also while the bot runs."""
    _configure_logging(verbose)
    ctx.obj = _Options(database, as_json)


pass_options = click.make_pass_decorator(_Options)


@cli.command()
@click.option(
    "--near-hours",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Rows expiring within this many hours count as near expiry.",
)
@pass_options
def stats(opts: _Options, near_hours: float) -> None:
    """What the database holds: entries by scope, servers, users, expiry, size, schema."""

    async def read() -> dict[str, Any]:
        async with _reading(opts) as store:
            now = time.time()
            found = await store.stats(
                _thresholds(opts.config, now), _thresholds(opts.config, now + near_hours * HOUR)
            )
        return {
            "database": opts.path,
            "schema_version": found.schema_version,
            "database_bytes": found.database_bytes,
            "entries": found.entries,
            "entries_by_scope": found.entries_by_scope,
            "distilled": found.distilled,
            "servers": found.servers,
            "users": found.users,
            "expired": found.expired,
            "near_expiry": found.near_expiry,
            "near_expiry_hours": near_hours,
            "opted_out_users": found.opt_outs,
            "servers_with_settings": found.server_settings,
            "feed_position": found.feed_position,
        }

    data = _run(read())
    if opts.as_json:
        _echo_json(data)
        return
    scopes = data["entries_by_scope"]
    feed = data["feed_position"]
    _echo_pairs(
        [
            ("database", printable(data["database"])),
            ("schema version", str(data["schema_version"])),
            ("size", human_bytes(data["database_bytes"])),
            ("entries", f"{data['entries']} (server {scopes['server']}, user {scopes['user']})"),
            ("with distilled memory", str(data["distilled"])),
            ("servers", str(data["servers"])),
            ("users", str(data["users"])),
            ("expired", f"{data['expired']} (the next janitor pass deletes them)"),
            ("near expiry", f"{data['near_expiry']} (within {near_hours:g} h)"),
            ("opted-out users", str(data["opted_out_users"])),
            ("servers with settings", str(data["servers_with_settings"])),
            ("feed position", "none (no change feed)" if feed is None else str(feed)),
        ]
    )


@cli.command()
@click.argument("key", required=False)
@click.option("--user", "user_id", type=ID, help="All of a user's entries, and shared ones.")
@click.option("--channel", "channel_id", type=ID, help="All entries of a channel.")
@pass_options
def show(opts: _Options, key: str | None, user_id: int | None, channel_id: int | None) -> None:
    """One scope key, or every entry of a user (--user) or of a channel (--channel)."""
    if sum(x is not None for x in (key, user_id, channel_id)) != 1:
        raise click.UsageError("give exactly one of KEY, --user ID or --channel ID")
    if key is not None:
        try:
            parse_key(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEY") from None

    async def read() -> tuple[list[StoredRow], UserHoldings | None]:
        async with _reading(opts) as store:
            if key is not None:
                row = await store.row(key)
                return ([] if row is None else [row]), None
            if channel_id is not None:
                return await store.rows_of_channel(channel_id), None
            assert user_id is not None
            holdings = await store.holdings_of_user(user_id)
            return holdings.own + holdings.contributed, holdings

    rows, holdings = _run(read())
    now = time.time()
    if opts.as_json:
        _echo_json(
            {
                "entries": [_row_json(row, opts.config, contributors=True) for row in rows],
                **({} if holdings is None else {"opted_out": _opt_out_json(holdings)}),
            }
        )
        return
    if key is not None:
        if not rows:
            raise CommandError(f"nothing is held under {key}")
        _echo_entry(rows[0], opts.config, now)
        return
    if holdings is not None:
        _echo_rows("the user's own entries", holdings.own, opts.config, now)
        _echo_rows("shared entries the user contributed to", holdings.contributed, opts.config, now)
        if holdings.opted_out_since is not None:
            click.echo(f"opted out since {iso(holdings.opted_out_since)}")
        return
    _echo_rows(f"entries of channel {channel_id}", rows, opts.config, now)


@cli.command()
@click.option("--user", "user_id", type=ID, required=True, help="The user's Discord id.")
@pass_options
def export(opts: _Options, user_id: int) -> None:
    """Everything held about a user, as JSON (an answer to a data request)."""

    async def read() -> UserHoldings:
        async with _reading(opts) as store:
            return await store.holdings_of_user(user_id)

    holdings = _run(read())
    _echo_json(
        {
            "user_id": user_id,
            "exported_at": iso(time.time()),
            "database": opts.path,
            "entries": [_row_json(row, opts.config) for row in holdings.own],
            "contributed_to": [_row_json(row, opts.config) for row in holdings.contributed],
            "opted_out": _opt_out_json(holdings),
            "not_included": (
                "recent messages (crude memory) are held only in the memory of running bot "
                "processes, never in the database; they expire after "
                f"{opts.config.crude_ttl_hours:g} hours without activity"
            ),
        }
    )


@cli.command("purge-user")
@click.argument("user_id", type=ID, metavar="ID")
@click.option("--server", "server_id", type=ID, help="Only in this server (default: everywhere).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def purge_user(opts: _Options, user_id: int, server_id: int | None, yes: bool) -> None:
    """Erase everything held about a user (and shared memory they contributed to)."""
    where = "everywhere" if server_id is None else f"in server {server_id}"

    async def preview() -> int:
        async with _reading(opts) as store:
            return _in_server(await store.holdings_of_user(user_id), server_id)

    held = _run(preview())
    _confirm(
        yes,
        f"Erase user {user_id}'s short-term memory {where} ({held} entries) from "
        f"{printable(opts.path)}?",
    )

    async def purge(memory: ShortTermMemory) -> None:
        await memory.clear_short_term_memory_for_user(user_id, server_id)

    async def left() -> int:
        async with _reading(opts) as store:
            return _in_server(await store.holdings_of_user(user_id), server_id)

    done = _run(_durably(opts, purge, f"purge of user {user_id} {where}"))
    remaining = _run(left())
    log.info("purged user %s %s from %s in %.2fs", user_id, where, opts.path, done.seconds)
    _report(
        opts,
        {"purged": "user", "user_id": user_id, "server_id": server_id, "entries_before": held},
        remaining,
        done,
        f"purged user {user_id} {where}: {held} entries erased or cleared",
    )


@cli.command("purge-channel")
@click.argument("channel_id", type=ID, metavar="ID")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def purge_channel(opts: _Options, channel_id: int, yes: bool) -> None:
    """Erase every scope and persona of a channel's memory (what /refresh does)."""

    async def count() -> int:
        async with _reading(opts) as store:
            return len(await store.rows_of_channel(channel_id))

    held = _run(count())
    _confirm(
        yes,
        f"Erase channel {channel_id}'s short-term memory ({held} entries) from "
        f"{printable(opts.path)}?",
    )

    async def purge(memory: ShortTermMemory) -> None:
        await memory.clear_short_term_memory_for_channel(channel_id)

    done = _run(_durably(opts, purge, f"purge of channel {channel_id}"))
    remaining = _run(count())
    log.info("purged channel %s from %s in %.2fs", channel_id, opts.path, done.seconds)
    _report(
        opts,
        {"purged": "channel", "channel_id": channel_id, "entries_before": held},
        remaining,
        done,
        f"purged channel {channel_id}: {held} entries erased",
    )


@cli.command()
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def janitor(opts: _Options, dry_run: bool, yes: bool) -> None:
    """Delete expired rows now (bots also do it every STM_JANITOR_INTERVAL_MINUTES)."""

    async def count() -> int:
        async with _reading(opts) as store:
            return await store.count_expired(_thresholds(opts.config, time.time()))

    expired = _run(count())
    if dry_run:
        if opts.as_json:
            _echo_json({"expired": expired, "deleted": 0, "dry_run": True})
        else:
            click.echo(f"{expired} expired rows would be deleted")
        return
    _confirm(yes, f"Delete {expired} expired rows from {printable(opts.path)}?")

    async def sweep(memory: ShortTermMemory) -> None:
        await memory.run_janitor()

    done = _run(_durably(opts, sweep, "janitor pass"))
    remaining = _run(count())
    if opts.as_json:
        _echo_json(
            {"expired": expired, "deleted": expired - remaining, "dry_run": False, **done.json()}
        )
    else:
        click.echo(f"deleted {expired - remaining} expired rows; durable ({done.text()})")


@cli.command()
@click.option("--create", is_flag=True, help="Create the database if it does not exist.")
@pass_options
def migrate(opts: _Options, create: bool) -> None:
    """Bring the database's schema to this version's (bots do it when they start)."""
    path = opts.path

    exists = os.path.exists(path)
    if not exists and not create:
        raise CommandError(
            f"no short-term memory database at {path!r} (nothing was created); "
            "pass --create to make a new one"
        )

    async def run() -> tuple[int | None, int]:
        before: int | None = None
        if exists:
            async with _reading(opts, require_current=False) as store:
                before = await store.schema_version()
        store = await SQLiteStore.open(path, busy_timeout_ms=opts.config.busy_timeout_ms)
        try:
            return before, await store.schema_version()
        finally:
            await store.close()

    before, after = _run(run())
    if opts.as_json:
        _echo_json({"database": path, "created": before is None, "from": before, "to": after})
    elif before is None:
        click.echo(f"created {printable(path)} at schema version {after}")
    elif before == after:
        click.echo(f"{printable(path)} is at schema version {after}: nothing to do")
    else:
        click.echo(f"migrated {printable(path)} from schema version {before} to {after}")


@cli.command()
@pass_options
def check(opts: _Options) -> int:
    """Integrity and foreign-key checks, and the schema version; exit status 1 on a problem."""

    async def run() -> Any:
        async with _reading(opts, require_current=False) as store:
            with _progress("checking the database"):
                return await store.check()

    report = _run(run())
    if opts.as_json:
        _echo_json(
            {
                "database": opts.path,
                "ok": report.ok,
                "integrity": report.integrity,
                "foreign_keys": report.foreign_keys,
                "schema_version": report.schema_version,
                "code_schema_version": report.code_version,
            }
        )
    else:
        good, bad = click.style("ok", fg="green"), click.style("FAILED", fg="red", bold=True)
        schema_ok = report.schema_version == report.code_version
        integrity_ok = report.integrity == ["ok"]
        _echo_pairs(
            [
                ("database", printable(opts.path)),
                ("integrity", good if integrity_ok else bad),
                ("foreign keys", good if not report.foreign_keys else bad),
                (
                    "schema version",
                    f"{report.schema_version} (this code: {report.code_version}) "
                    + (good if schema_ok else bad + " (run migrate)"),
                ),
            ]
        )
        for line in ([] if integrity_ok else report.integrity) + report.foreign_keys:
            click.echo("  " + printable(line))
    return 0 if report.ok else 1


# -- running ------------------------------------------------------------------------
def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Run the command line; exit with its status (errors: one line on stderr)."""
    try:
        status = cli.main(args=argv, prog_name=prog_name or _prog_name(), standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted: nothing was changed", 1)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _fail(exc.format_message() + hint, exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    sys.exit(status if isinstance(status, int) else 0)


def _prog_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m stm" if name in ("", "__main__.py", "-c") else name


def _fail(message: str, status: int) -> None:
    click.echo(f"stm: error: {' '.join(message.split())}", err=True)
    sys.exit(status)


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run one step of a command; library errors become one-line command errors."""
    try:
        return asyncio.run(coro)
    except STMError as exc:
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        raise CommandError(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")) from exc


@contextlib.asynccontextmanager
async def _reading(opts: _Options, *, require_current: bool = True) -> AsyncIterator[SQLiteStore]:
    """The database, read-only; it must exist and be a short-term memory database."""
    store = await SQLiteStore.open_existing(
        opts.path, busy_timeout_ms=opts.config.busy_timeout_ms, require_current=require_current
    )
    try:
        yield store
    finally:
        await store.close()


@dataclass(frozen=True)
class _Done:
    """How a change went: its time, and the writes it took (from ``memory.metrics``)."""

    seconds: float
    metrics: MetricsSnapshot

    def json(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "seconds": round(self.seconds, 3),
            "commits": m.writer_batches,
            "durable_write_failures": m.durable_write_failures,
            "durable_write_retries": m.durable_write_retries,
        }

    def text(self) -> str:
        retries = self.metrics.durable_write_retries
        return f"{self.seconds:.2f} s" + (f", after {retries} retries" if retries else "")


async def _durably(
    opts: _Options, change: Callable[[ShortTermMemory], Coroutine[Any, Any, None]], what: str
) -> _Done:
    """Make ``change`` through the library and wait until it is durable."""
    if not await asyncio.to_thread(os.path.isfile, opts.path):
        # Checked again right before: ShortTermMemory.open would create a missing file.
        raise CommandError(f"no short-term memory database at {opts.path!r} (nothing was created)")
    started = time.perf_counter()
    memory = await ShortTermMemory.open(opts.config)
    failure: DurabilityError | None = None
    try:
        with _progress(what):
            await change(memory)
            for attempt in range(1, FLUSH_ATTEMPTS + 1):
                try:
                    await memory.flush()
                    failure = None
                    break
                except DurabilityError as exc:
                    failure = exc
                    if attempt < FLUSH_ATTEMPTS:
                        await asyncio.sleep(opts.config.delete_retry_seconds * attempt)
            if failure is not None:
                raise CommandError(f"{what} is not durable: {failure}")
        done = _Done(time.perf_counter() - started, memory.metrics)
    finally:
        with contextlib.suppress(DurabilityError):
            await memory.close()  # the error above already says what is not durable
    return done


# -- asking -----------------------------------------------------------------------
def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CommandError("not changing anything without confirmation: pass --yes (stdin is "
                           "not a terminal)")  # fmt: skip
    if not click.confirm(question, default=False, err=True):
        raise CommandError("aborted: nothing was changed")


# -- printing ---------------------------------------------------------------------
def _configure_logging(verbose: int) -> None:
    if verbose:
        logging.basicConfig(
            level=logging.DEBUG if verbose > 1 else logging.INFO,
            stream=sys.stderr,
            format="%(levelname)s %(name)s: %(message)s",
        )
    else:
        # Without a handler Python prints warnings with their tracebacks: errors the
        # operator must see come back as the command's own one-line message instead.
        logging.getLogger().addHandler(logging.NullHandler())


@contextlib.contextmanager
def _progress(what: str) -> Iterator[None]:
    """Say what a long step is doing, on a terminal only (stderr, so output stays clean)."""
    if not sys.stderr.isatty():
        yield
        return
    click.echo(click.style(f"{what}…", dim=True), err=True, nl=False)
    try:
        yield
    finally:
        click.echo("\r\x1b[K", err=True, nl=False)


def _echo_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _echo_pairs(pairs: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        click.echo(f"{click.style(name.ljust(width), bold=True)}  {value}")


def _echo_rows(title: str, rows: list[StoredRow], config: STMConfig, now: float) -> None:
    click.echo(click.style(f"{title}: {len(rows)}", bold=True))
    if not rows:
        return
    headers = ("KEY", "SERVER", "CHANNEL", "UPDATED", "EXPIRES", "MEMORY")
    cells = [
        [
            row.key,
            "-" if row.server_id is None else str(row.server_id),
            printable(row.channel_name or str(row.channel_id)),
            ago(now - row.updated_at),
            until(_expires_at(row, config) - now),
            _memory_text(row),
        ]
        for row in rows
    ]
    fixed = table(headers[:-1], [c[:-1] for c in cells])
    room = max(20, _columns() - max(len(line) for line in fixed) - 2)
    for i, line in enumerate(table(headers, [[*c[:-1], shorten(c[-1], room)] for c in cells])):
        click.echo(click.style(line, bold=True) if i == 0 else line)


def _echo_entry(row: StoredRow, config: STMConfig, now: float) -> None:
    expires = _expires_at(row, config)
    pairs = [
        ("key", row.key),
        ("scope", row.scope),
        ("server", _named(row.server_id, row.server_name)),
        ("channel", _named(row.channel_id, row.channel_name)),
        ("private channel", "yes" if row.channel_private else "no"),
        ("persona", "-" if row.persona_id is None else str(row.persona_id)),
        ("updated", f"{iso(row.updated_at)} ({ago(now - row.updated_at)})"),
        ("expires", f"{iso(expires)} ({until(expires - now)})"),
        ("turns since update", str(row.turns_since_refresh)),
        ("contributors", ", ".join(str(u) for u in sorted(row.contributors)) or "-"),
        ("summary", printable(row.summary) if row.summary else "-"),
    ]  # fmt: skip
    pairs += [(f"  {name}", printable(value)) for name, value in sorted(row.categories.items())]
    _echo_pairs(pairs)


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


def _columns() -> int:
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120


def _row_json(row: StoredRow, config: STMConfig, *, contributors: bool = False) -> dict[str, Any]:
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
        "expires_at": iso(_expires_at(row, config)),
    }
    if contributors:
        # Not in exports: the other contributors are other people's data.
        data["contributors"] = sorted(row.contributors)
    return data


def _opt_out_json(holdings: UserHoldings) -> dict[str, Any]:
    since = holdings.opted_out_since
    return {"opted_out": since is not None, "since": None if since is None else iso(since)}


def _report(opts: _Options, data: dict[str, Any], remaining: int, done: _Done, text: str) -> None:
    """Say what a purge did, once durable; a row written since (by a running bot) is named."""
    if opts.as_json:
        _echo_json({**data, "durable": True, "entries_now": remaining, **done.json()})
        return
    click.echo(f"{text}; durable, file rewritten ({done.text()})")
    if remaining:
        click.echo(f"{remaining} entries were written again since (new activity)")


def _in_server(holdings: UserHoldings, server_id: int | None) -> int:
    rows = holdings.own + holdings.contributed
    return sum(1 for row in rows if server_id is None or row.server_id == server_id)


def _expires_at(row: StoredRow, config: STMConfig) -> float:
    return entry_from(row).expires_at(
        config.crude_ttl_hours * HOUR, config.summary_ttl_hours * HOUR
    )


def _thresholds(config: STMConfig, now: float) -> tuple[float, float]:
    """(crude_before, summary_before): rows last active before these have expired at ``now``."""
    return now - config.crude_ttl_hours * HOUR, now - config.summary_ttl_hours * HOUR
