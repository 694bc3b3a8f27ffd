"""The commands of ``python -m stm``: stats, show, export, purges, janitor, migrate, check."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from .._errors import DurabilityError, NoDatabase
from .._expiry import HOUR
from .._history import changes, version_text
from .._keys import parse_key
from .._memory import ShortTermMemory
from .._models import PurgeImpact
from .._tables import human_bytes, iso, printable
from ..store._base import CheckReport, NoteVersion, PurgePreview, StoredRow, UserHoldings
from ..store._inspect import open_migrating
from ._access import (
    NOTHING_CHANGED,
    CommandError,
    Declined,
    Options,
    configure_logging,
    confirm,
    durably,
    janitor_ttls,
    progress,
    reading,
    run,
    thresholds,
)
from ._pending import PendingCover, pending_cover
from ._view import (
    echo_entry,
    echo_json,
    echo_pairs,
    echo_rows,
    impact_json,
    impact_lines,
    opt_out_json,
    report,
    row_json,
    shared_row_json,
)

__all__ = ["cli", "main"]

log = logging.getLogger("stm.cli")


# Discord ids are unsigned 64-bit snowflakes; SQLite stores signed 64-bit integers.
class DiscordId(click.ParamType):  # type: ignore[type-arg]
    """An id as Discord writes one: a whole number from 0 to 2**63 - 1."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if not (text.isascii() and text.isdigit()):
                self.fail(f"{printable(str(value))!r} is not an id: {ID_RULE}", param, ctx)
            number = int(text)
        if not 0 <= number < 2**63:
            self.fail(f"{number} is out of range: {ID_RULE}", param, ctx)
        return number


ID_RULE = "ids are whole numbers from 0 to 9223372036854775807, as Discord's are"
ID = DiscordId()


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
    configure_logging(verbose)
    ctx.obj = Options(database, as_json)


pass_options = click.make_pass_decorator(Options)


def _json_here(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(Options).as_json = True  # type: ignore[union-attr]


# Scripts write `stats --json` as often as `--json stats`: both mean the same.
json_flag = click.option(
    "--json",
    is_flag=True,
    expose_value=False,
    callback=_json_here,
    help="Print JSON for scripts (also accepted before the command).",
)


@cli.command()
@json_flag
@click.option(
    "--near-hours",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Rows expiring within this many hours count as near expiry.",
)
@pass_options
def stats(opts: Options, near_hours: float) -> None:
    """What the database holds: entries by scope, servers, users, expiry, size, schema."""

    async def read() -> dict[str, Any]:
        async with reading(opts) as store:
            now = time.time()
            found = await store.stats(
                thresholds(opts.config, now), thresholds(opts.config, now + near_hours * HOUR)
            )
        return {
            "database": opts.shown,
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

    data = run(read())
    if opts.as_json:
        echo_json(data)
        return
    scopes = data["entries_by_scope"]
    feed = data["feed_position"]
    echo_pairs(
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
@json_flag
@click.argument("key", required=False)
@click.option("--user", "user_id", type=ID, help="All of a user's entries, and shared ones.")
@click.option("--channel", "channel_id", type=ID, help="All entries of a channel.")
@pass_options
def show(opts: Options, key: str | None, user_id: int | None, channel_id: int | None) -> None:
    """One scope key, or every entry of a user (--user) or of a channel (--channel)."""
    if sum(x is not None for x in (key, user_id, channel_id)) != 1:
        raise click.UsageError("give exactly one of KEY, --user ID or --channel ID")
    if key is not None:
        try:
            parse_key(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEY") from None

    async def read() -> tuple[
        list[StoredRow], UserHoldings | None, list[list[int]], PendingCover, int
    ]:
        async with reading(opts) as store:
            holdings = None
            if key is not None:
                row = await store.row(key)
                rows = [] if row is None else [row]
            elif channel_id is not None:
                rows = await store.rows_of_channel(channel_id)
            else:
                assert user_id is not None
                holdings = await store.holdings_of_user(user_id, opts.config.erasure)
                rows = holdings.own + holdings.contributed
            # What a pending delete is about to erase is not shown as held.
            cover = await pending_cover(store, opts.config)
            found = len(rows)
            rows = cover.kept(rows)
            if holdings is not None:
                holdings = replace(
                    holdings,
                    own=cover.kept(holdings.own),
                    contributed=cover.kept(holdings.contributed),
                )
            shown = [[] if r.pin is None else await store.members(r.pin) for r in rows]
            return rows, holdings, shown, cover, found - len(rows)

    rows, holdings, shown, cover, left_out = run(read())
    now = time.time()
    if opts.as_json:
        echo_json(
            {
                "entries": [
                    row_json(row, opts.config, contributors=users)
                    for row, users in zip(rows, shown, strict=True)
                ],
                **({} if holdings is None else {"opted_out": opt_out_json(holdings)}),
                **cover.json(left_out),
            }
        )
        return
    note = cover.line(left_out)
    if key is not None:
        if not rows:
            raise CommandError(f"nothing is held under {key}" + (f" ({note})" if note else ""))
        echo_entry(rows[0], opts.config, now, shown[0])
        return
    if holdings is not None:
        echo_rows("the user's own entries", holdings.own, opts.config, now)
        echo_rows("shared entries the user contributed to", holdings.contributed, opts.config, now)
        if holdings.opted_out_since is not None:
            click.echo(f"opted out since {iso(holdings.opted_out_since)}")
    else:
        echo_rows(f"entries of channel {channel_id}", rows, opts.config, now)
    if note:
        click.echo(printable(note))


# Said in every export that carries other people's text, and on stderr when it is made.
REVIEW = (
    "contributed_to holds the text of shared entries the user's words may be in: other "
    "people's words too. Review it and remove what is not the user's before sending it."
)


@cli.command()
@json_flag
@click.option("--user", "user_id", type=ID, required=True, help="The user's Discord id.")
@click.option(
    "--include-shared-text",
    is_flag=True,
    help="Add the text of the shared entries the user's words may be in (other people's "
    "words too: the output is marked as needing review before it is sent).",
)
@pass_options
def export(opts: Options, user_id: int, include_shared_text: bool) -> None:
    """Everything held about a user, as JSON (an answer to a data request).

    The user's own entries in full; of the shared entries their words may be in, where
    and when only (other people's text and ids are theirs), unless --include-shared-text.
    """

    async def read() -> tuple[UserHoldings, PendingCover, int]:
        async with reading(opts) as store:
            held = await store.holdings_of_user(user_id, opts.config.erasure)
            # What a pending delete (the user's own purge above all) is about to erase is
            # not reported as held.
            cover = await pending_cover(store, opts.config)
            kept = replace(held, own=cover.kept(held.own), contributed=cover.kept(held.contributed))
            left_out = len(held.own) + len(held.contributed) - len(kept.own) - len(kept.contributed)
            return kept, cover, left_out

    holdings, cover, left_out = run(read())
    if include_shared_text:
        click.echo(click.style(f"warning: {REVIEW}", fg="yellow"), err=True)
    echo_json(
        {
            "user_id": user_id,
            "exported_at": iso(time.time()),
            "database": opts.shown,
            "needs_review": include_shared_text,
            **({"review": REVIEW} if include_shared_text else {}),
            "entries": [
                row_json(row, opts.config)
                | {"history": [version_json(v) for v in holdings.history.get(row.key, [])]}
                for row in holdings.own
            ],
            "contributed_to": [
                shared_row_json(row, opts.config, text=include_shared_text)
                for row in holdings.contributed
            ],
            "contributed_to_means": (
                "shared entries whose notes were written from a prompt that may have shown the "
                f"user's words (erasure policy {opts.config.erasure}: what a purge of the user "
                "clears); the key of another user's own entry is left out, as it holds their id"
                + ("" if include_shared_text else "; their text is other people's data too")
            ),
            "opted_out": opt_out_json(holdings),
            **cover.json(left_out),
            "not_included": (
                "recent messages are held only in the memory of running bot "
                "processes, never in the database; they expire after "
                f"{opts.config.crude_ttl_hours:g} hours without activity"
            ),
        }
    )


@cli.command("purge-user")
@json_flag
@click.argument("user_id", type=ID, metavar="ID")
@click.option("--server", "server_id", type=ID, help="Only in this server (default: everywhere).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def purge_user(opts: Options, user_id: int, server_id: int | None, yes: bool) -> None:
    """Erase everything held about a user (and shared memory they contributed to).

    Shows first what it erases: the user's own entries, and the shared entries whose notes
    it clears, with each server's share.
    """
    where = "everywhere" if server_id is None else f"in server {server_id}"
    erasure = opts.config.erasure

    async def look() -> PurgePreview:
        async with reading(opts) as store:
            return await store.preview_purge(user_id, server_id, erasure)

    before = run(look())
    held = before.own + before.shared
    confirm(
        yes,
        f"Erase user {user_id}'s short-term memory {where} ({held} entries)?",
        preview="\n".join(
            [
                f"A purge of user {user_id} {where} in {printable(opts.shown)} erases:",
                *impact_lines(before, erasure),
            ]
        ),
    )
    erased: list[PurgeImpact] = []

    async def purge(memory: ShortTermMemory) -> None:
        # On a DurabilityError durably() tries the flush again, and says what is not durable.
        with contextlib.suppress(DurabilityError):
            erased.append(await memory.purge(user_id, server_id))

    done = run(durably(opts, purge, f"purge of user {user_id} {where}"))
    after = run(look())
    log.info("purged user %s %s from %s in %.2fs", user_id, where, opts.shown, done.seconds)
    own, shared = (erased[0].own, erased[0].shared) if erased else (before.own, before.shared)
    report(
        opts,
        {
            "purged": "user",
            "user_id": user_id,
            "server_id": server_id,
            "entries_before": held,
            "preview": impact_json(before, erasure),
            # None when the first flush failed and a retry made it durable: not counted.
            "erased": impact_json(erased[0], erasure) if erased else None,
        },
        after.own + after.shared,
        done,
        f"purged user {user_id} {where}: {own + shared} entries erased or cleared "
        f"({own} of their own, the notes of {shared} shared)",
    )


@cli.command("purge-channel")
@json_flag
@click.argument("channel_id", type=ID, metavar="ID")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def purge_channel(opts: Options, channel_id: int, yes: bool) -> None:
    """Erase every scope and persona of a channel's memory (what /refresh does)."""

    async def count() -> int:
        async with reading(opts) as store:
            return len(await store.rows_of_channel(channel_id))

    held = run(count())
    confirm(
        yes,
        f"Erase channel {channel_id}'s short-term memory ({held} entries) from "
        f"{printable(opts.shown)}?",
    )

    async def purge(memory: ShortTermMemory) -> None:
        await memory.clear_short_term_memory_for_channel(channel_id)

    done = run(durably(opts, purge, f"purge of channel {channel_id}"))
    remaining = run(count())
    log.info("purged channel %s from %s in %.2fs", channel_id, opts.shown, done.seconds)
    report(
        opts,
        {"purged": "channel", "channel_id": channel_id, "entries_before": held},
        remaining,
        done,
        f"purged channel {channel_id}: {held} entries erased",
    )


def _key(key: str) -> str:
    try:
        parse_key(key)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY") from None
    return key


def version_json(version: NoteVersion) -> dict[str, Any]:
    """One version of notes as the command line's JSON shows it."""
    return {
        "version": version.version,
        "current": version.current,
        "summary": version.summary,
        "categories": dict(version.categories),
        "written_at": iso(version.written_at),
        "written_by": version.written_by,
        "restored_from": version.restored_from,
    }


def _versions(opts: Options, key: str) -> list[NoteVersion]:
    async def read() -> list[NoteVersion]:
        async with reading(opts) as store:
            return await store.note_history(key)

    return run(read())


@cli.command()
@json_flag
@click.argument("key")
@pass_options
def history(opts: Options, key: str) -> None:
    """The versions of a key's notes the history keeps (STM_NOTE_HISTORY), newest first,
    each with what it changed of the one before."""
    versions = _versions(opts, _key(key))
    if opts.as_json:
        echo_json({"key": key, "versions": [version_json(v) for v in versions]})
        return
    if not versions:
        click.echo(f"no note history for {printable(key)}")
        return
    for at, version in enumerate(versions):
        who = "the operator" if version.written_by is None else f"user {version.written_by}"
        label = " (current)" if version.current else ""
        restored = "" if version.restored_from is None else f", restoring {version.restored_from}"
        click.echo(
            f"version {version.version}{label}: {iso(version.written_at)} by {who}{restored}"
        )
        for line in version_text(version).splitlines():
            click.echo(f"    {printable(line)}")
        if at + 1 < len(versions):
            for line in changes(version, versions[at + 1]):
                click.echo(f"  {printable(line)}")


@cli.command()
@json_flag
@click.argument("key")
@click.argument("version", type=click.IntRange(min=0))
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_options
def restore(opts: Options, key: str, version: int, yes: bool) -> None:
    """Bring back an earlier version of a key's notes (see 'history'); running bots show
    it within the coherence bound."""
    versions = {v.version: v for v in _versions(opts, _key(key))}
    found = versions.get(version)
    if found is None:
        raise CommandError(f"version {version} of {printable(key)} is not in its history")
    if found.current:
        raise CommandError(f"version {version} is already the current notes of {printable(key)}")
    text = printable(version_text(found))
    confirm(
        yes,
        f"Restore version {version} of {printable(key)}?",
        preview=f"Version {version} of {printable(key)} says:\n{text}",
    )
    outcome: list[bool] = []

    async def change(memory: ShortTermMemory) -> None:
        outcome.append(await memory.restore_notes(key, version))

    done = run(durably(opts, change, f"restore of {key}"))
    if not outcome or not outcome[0]:
        raise CommandError(f"version {version} of {printable(key)} was erased meanwhile")
    log.info("restored version %d of %s in %s", version, key, opts.shown)
    if opts.as_json:
        echo_json({"restored": key, "version": version, "durable": True, **done.json()})
    else:
        click.echo(f"restored version {version} of {printable(key)}; durable ({done.text()})")


TTL = click.FloatRange(min=0, min_open=True)


@cli.command()
@json_flag
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--crude-ttl-hours", type=TTL, metavar="H", help="The bot's STM_CRUDE_TTL_HOURS.")
@click.option("--summary-ttl-hours", type=TTL, metavar="H", help="The bot's STM_SUMMARY_TTL_HOURS.")
@click.option(
    "--env-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the TTLs from the bot's .env file (the defaults for what it does not set).",
)
@pass_options
def janitor(
    opts: Options,
    dry_run: bool,
    yes: bool,
    crude_ttl_hours: float | None,
    summary_ttl_hours: float | None,
    env_file: Path | None,
) -> None:
    """Delete expired rows now, by the bot's TTLs, given with --crude-ttl-hours and
    --summary-ttl-hours or --env-file (bots also do it every STM_JANITOR_INTERVAL_MINUTES)."""
    opts.use_ttls(*janitor_ttls(crude_ttl_hours, summary_ttl_hours, env_file))

    async def count() -> int:
        async with reading(opts) as store:
            return await store.count_expired(thresholds(opts.config, time.time()))

    expired = run(count())
    if dry_run:
        if opts.as_json:
            echo_json({"expired": expired, "deleted": 0, "dry_run": True})
        else:
            click.echo(f"{expired} expired rows would be deleted")
        return
    confirm(yes, f"Delete {expired} expired rows from {printable(opts.shown)}?")

    async def janitor_pass(memory: ShortTermMemory) -> None:
        await memory.run_janitor()

    done = run(durably(opts, janitor_pass, "janitor pass"))
    remaining = run(count())
    if opts.as_json:
        echo_json(
            {"expired": expired, "deleted": expired - remaining, "dry_run": False, **done.json()}
        )
    else:
        click.echo(f"deleted {expired - remaining} expired rows; durable ({done.text()})")


@cli.command()
@json_flag
@click.option("--create", is_flag=True, help="Create the database if it does not exist.")
@pass_options
def migrate(opts: Options, create: bool) -> None:
    """Bring the database's schema to this version's (bots do it when they start)."""
    path = opts.shown

    async def work() -> tuple[int | None, int]:
        before: int | None = None
        try:
            async with reading(opts, require_current=False) as found:
                before = await found.schema_version()
        except NoDatabase:
            if not create:
                raise CommandError(
                    f"no short-term memory database at {path!r} (nothing was created); "
                    "pass --create to make a new one"
                ) from None
        store = await open_migrating(opts.config)
        try:
            return before, await store.schema_version()
        finally:
            await store.close()

    before, after = run(work())
    if opts.as_json:
        echo_json({"database": path, "created": before is None, "from": before, "to": after})
    elif before is None:
        click.echo(f"created {printable(path)} at schema version {after}")
    elif before == after:
        click.echo(f"{printable(path)} is at schema version {after}: nothing to do")
    else:
        click.echo(f"migrated {printable(path)} from schema version {before} to {after}")


@cli.command()
@json_flag
@pass_options
def check(opts: Options) -> int:
    """Integrity and foreign-key checks, and the schema version; exit status 1 on a problem."""

    async def work() -> CheckReport:
        async with reading(opts, require_current=False) as store:
            with progress("checking the database"):
                return await store.check()

    found = run(work())
    if opts.as_json:
        echo_json(
            {
                "database": opts.shown,
                "ok": found.ok,
                "integrity": found.integrity,
                "foreign_keys": found.foreign_keys,
                "schema_version": found.schema_version,
                "code_schema_version": found.code_version,
            }
        )
    else:
        good, bad = click.style("ok", fg="green"), click.style("FAILED", fg="red", bold=True)
        schema_ok = found.schema_version == found.code_version
        integrity_ok = found.integrity == ["ok"]
        echo_pairs(
            [
                ("database", printable(opts.shown)),
                ("integrity", good if integrity_ok else bad),
                ("foreign keys", good if not found.foreign_keys else bad),
                (
                    "schema version",
                    f"{found.schema_version} (this code: {found.code_version}) "
                    + (good if schema_ok else bad + " (run migrate)"),
                ),
            ]
        )
        for line in ([] if integrity_ok else found.integrity) + found.foreign_keys:
            click.echo("  " + printable(line))
    return 0 if found.ok else 1


# -- running ------------------------------------------------------------------------
def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Run the command line; exit with its status (errors: one line on stderr)."""
    try:
        status = cli.main(args=argv, prog_name=prog_name or _prog_name(), standalone_mode=False)
    except (click.exceptions.Abort, Declined):
        # Not an error: the operator chose. Status 1 all the same, so that a script does
        # not go on as if the change had been made.
        click.echo(NOTHING_CHANGED, err=True)
        sys.exit(1)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        message = exc.format_message()
        if (
            isinstance(exc, click.BadParameter)
            and not isinstance(exc, click.MissingParameter)
            and exc.param is not None
            and exc.ctx is not None
        ):
            message = f"{exc.param.get_error_hint(exc.ctx)}: {exc.message}"  # in our words
        _fail(message + hint, exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    sys.exit(status if isinstance(status, int) else 0)


def _prog_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m stm" if name in ("", "__main__.py", "-c") else name


def _fail(message: str, status: int) -> None:
    click.echo(f"stm: error: {printable(' '.join(message.split()))}", err=True)
    sys.exit(status)
