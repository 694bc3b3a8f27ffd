"""How a command reaches the database: read-only, or through the library until durable."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic_settings import DotEnvSettingsSource

from .._config import STMConfig
from .._errors import ConfigError, DurabilityError, STMError
from .._expiry import Expiry, Thresholds
from .._memory import ShortTermMemory
from .._metrics import MetricsSnapshot
from ..store._base import Inspector
from ..store._inspect import file_missing, open_inspector, shown

__all__ = [
    "NOTHING_CHANGED",
    "CommandError",
    "Declined",
    "Done",
    "Options",
    "configure_logging",
    "confirm",
    "durably",
    "janitor_ttls",
    "progress",
    "reading",
    "run",
    "thresholds",
]

_T = TypeVar("_T")
# Tries of a purge's flush before the command gives up (the library keeps nothing
# queued once this process exits, so the error says what is not durable).
FLUSH_ATTEMPTS = 3


class CommandError(click.ClickException):
    """An error the operator can act on: one line, exit status 1."""


class Declined(Exception):
    """The operator answered no (or closed the prompt): nothing was changed, exit status 1
    so that a script does not go on as if it had been."""


NOTHING_CHANGED = "Nothing was changed."


@dataclass
class Options:
    database: str | None
    as_json: bool
    _config: STMConfig | None = None

    @property
    def config(self) -> STMConfig:
        """The ``STM_*`` settings, with ``--database`` over ``STM_DATABASE``."""
        if self._config is None:
            overrides = {} if self.database is None else {"database": self.database}
            try:
                self._config = STMConfig(**overrides)
            except ConfigError as exc:  # read outside ``run`` too: one line either way
                raise CommandError(str(exc)) from None
        return self._config

    @property
    def shown(self) -> str:
        """The database as output shows it (a server's URL without its password)."""
        return shown(self.config.database)

    def use_ttls(self, crude_ttl_hours: float, summary_ttl_hours: float) -> None:
        """Judge expiry by these TTLs (the bot's), not by this shell's ``STM_*``."""
        update = {"crude_ttl_hours": crude_ttl_hours, "summary_ttl_hours": summary_ttl_hours}
        self._config = self.config.model_copy(update=update)


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run one step of a command; library errors become one-line command errors."""
    try:
        return asyncio.run(coro)
    except STMError as exc:
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        raise CommandError(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")) from exc


@contextlib.asynccontextmanager
async def reading(opts: Options, *, require_current: bool = True) -> AsyncIterator[Inspector]:
    """The database, read-only; it must exist and be a short-term memory database."""
    store = await open_inspector(opts.config, require_current=require_current)
    try:
        yield store
    finally:
        await store.close()


@dataclass(frozen=True)
class Done:
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


async def durably(
    opts: Options, change: Callable[[ShortTermMemory], Coroutine[Any, Any, None]], what: str
) -> Done:
    """Make ``change`` through the library and wait until it is durable."""
    if await asyncio.to_thread(file_missing, opts.config):
        # Checked again right before: ShortTermMemory.open would create a missing file.
        raise CommandError(f"no short-term memory database at {opts.shown!r} (nothing was created)")
    started = time.perf_counter()
    memory = await ShortTermMemory.open(opts.config)
    failure: DurabilityError | None = None
    try:
        with progress(what):
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
        done = Done(time.perf_counter() - started, memory.metrics)
    finally:
        with contextlib.suppress(DurabilityError):
            await memory.close()  # the error above already says what is not durable
    return done


# -- asking -----------------------------------------------------------------------
def confirm(yes: bool, question: str, *, preview: str = "") -> None:
    """Go on with ``--yes``; on a terminal, show ``preview`` and ask ``question``. Without
    a terminal, show ``preview`` (on stderr) and refuse, naming ``--yes``."""
    if yes:
        return
    if not sys.stdin.isatty():
        if preview:
            click.echo(preview, err=True)
        raise CommandError("not changing anything without confirmation: pass --yes (stdin is "
                           "not a terminal)")  # fmt: skip
    asked = f"{preview}\n{question}" if preview else question
    if not click.confirm(asked, default=False, err=True):
        raise Declined


def configure_logging(verbose: int) -> None:
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
def progress(what: str) -> Iterator[None]:
    """Say what a long step is doing, on a terminal only (stderr, so output stays clean)."""
    if not sys.stderr.isatty():
        yield
        return
    click.echo(click.style(f"{what}…", dim=True), err=True, nl=False)
    try:
        yield
    finally:
        click.echo("\r\x1b[K", err=True, nl=False)


NO_TTLS = (
    "janitor deletes what has expired by the bot's TTLs, which this shell's STM_* settings "
    "may not be: pass --crude-ttl-hours and --summary-ttl-hours (the bot's "
    "STM_CRUDE_TTL_HOURS and STM_SUMMARY_TTL_HOURS), or --env-file naming the file the bot "
    "reads its settings from"
)


def janitor_ttls(
    crude: float | None, summary: float | None, env_file: Path | None
) -> tuple[float, float]:
    """The TTLs the janitor judges expiry by: given on the command line, or read from the
    bot's env file alone (the library's defaults for what it does not set); never from
    this process's environment. Raises ``click.UsageError`` (exit status 2) otherwise."""
    if env_file is not None:
        found = DotEnvSettingsSource(STMConfig, env_file=env_file)()
        defaults = STMConfig.model_fields
        if crude is None:
            crude = found.get("crude_ttl_hours", defaults["crude_ttl_hours"].default)
        if summary is None:
            summary = found.get("summary_ttl_hours", defaults["summary_ttl_hours"].default)
    elif crude is None or summary is None:
        raise click.UsageError(NO_TTLS)
    try:
        checked = STMConfig(crude_ttl_hours=crude, summary_ttl_hours=summary)
    except ConfigError as exc:
        where = f" in {env_file}" if env_file is not None else ""
        raise click.UsageError(f"{exc}{where}") from None
    return checked.crude_ttl_hours, checked.summary_ttl_hours


def thresholds(config: STMConfig, now: float) -> Thresholds:
    """Rows last active at or before these have expired at ``now`` (the library's rule)."""
    return Expiry.hours(config.crude_ttl_hours, config.summary_ttl_hours).thresholds(now)
