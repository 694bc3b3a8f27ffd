"""Where a workload's memory lives: a fresh SQLite file, or a fresh PostgreSQL database.

The PostgreSQL rows run when a server is named, with ``--database`` (which
``benchmarks.run`` passes on as ``STM_BENCH_DATABASE``) or ``STM_DATABASE``
set to a ``postgresql://`` URL. Each run creates its own scratch database on
that server and drops it afterwards, so runs never see each other's rows. The
library is handed the scratch URL as ``STMConfig(database=...)``, exactly as a
bot would set ``STM_DATABASE``; while the library refuses PostgreSQL, the row
is reported as skipped with the library's own message.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from subprocess import PIPE
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .common import scratch_dir

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Skipped(Exception):
    """A row that cannot run here; its message says why and how to run it."""


def postgres_url() -> str | None:
    """The PostgreSQL server to measure against, if one was named."""
    for name in ("STM_BENCH_DATABASE", "STM_DATABASE"):
        value = os.environ.get(name, "")
        if value.startswith(POSTGRES_SCHEMES):
            return value
    return None


def skipped(reason: str) -> dict[str, Any]:
    """What a worker prints for a row that did not run."""
    return {"skipped": reason}


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def _admin(url: str, statement: str) -> None:
    """Run one statement against the server's maintenance database (asyncpg, else psql)."""
    try:
        import asyncpg
    except ImportError:
        asyncpg = None
    if asyncpg is not None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()
        return
    try:
        psql = await asyncio.create_subprocess_exec(
            "psql", url, "-qc", statement, stdout=PIPE, stderr=PIPE
        )
    except FileNotFoundError:
        raise Skipped("neither asyncpg nor psql is installed to create databases") from None
    _, error = await psql.communicate()
    if psql.returncode:
        raise RuntimeError(error.decode(errors="replace").strip())


@asynccontextmanager
async def postgres_scratch(tag: str) -> AsyncIterator[str]:
    """A new, empty database on the named server, dropped on exit."""
    url = postgres_url()
    if url is None:
        raise Skipped(
            "no PostgreSQL server named: pass --database postgresql://... "
            "(or set STM_DATABASE) to run this row"
        )
    base = urlsplit(url).path.lstrip("/") or "postgres"
    name = re.sub(r"[^a-z0-9_]", "_", f"{base}_bench_{tag}_{os.getpid()}".lower())[:63]
    try:
        await _admin(url, f'DROP DATABASE IF EXISTS "{name}"')
        await _admin(url, f'CREATE DATABASE "{name}"')
    except Skipped:
        raise
    except Exception as exc:
        raise Skipped(f"could not create a scratch database on {url}: {exc}") from exc
    try:
        yield _with_database(url, name)
    finally:
        await _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def memory_database(backend: str, tag: str) -> AsyncIterator[str]:
    """The ``STM_DATABASE`` value for one run: a new SQLite file or PostgreSQL database."""
    if backend == "postgresql":
        async with postgres_scratch(tag) as url:
            yield url
    else:
        with scratch_dir() as folder:
            yield str(folder / "stm.sqlite3")


async def open_memory(database: str, **settings: Any) -> Any:
    """``ShortTermMemory.open`` on ``database``; a refusal of the backend becomes Skipped."""
    from stm import ConfigError, ShortTermMemory, STMConfig

    clock = settings.pop("clock", None)
    try:
        config = STMConfig(database=database, **settings)
        if clock is None:
            return await ShortTermMemory.open(config)
        return await ShortTermMemory.open(config, clock=clock)
    except ConfigError as exc:
        if database.startswith(POSTGRES_SCHEMES):
            raise Skipped(f"the library refused PostgreSQL: {exc}") from exc
        raise
