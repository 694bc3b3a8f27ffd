"""Shared fixtures: a controllable clock, a config on a temporary SQLite file, an open memory,
a throwaway PostgreSQL database, and a store of either kind; and for every test a working
folder outside the checkout (checkout.py) and subprocesses only where marked (processes.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# pytest finds hooks and fixtures by their names in this module.
from checkout import (  # noqa: F401
    outside_the_checkout,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)
from helpers import Opener, StoreOpener
from processes import processes_only_where_marked  # noqa: F401

from stm import ShortTermMemory, STMConfig
from stm.testing import Clock

if TYPE_CHECKING:
    from discord_fakes import BotOpener


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "stm.sqlite3"


@pytest.fixture
def config(store_database: str) -> STMConfig:
    return STMConfig(database=store_database, write_behind_seconds=0.05, delete_retry_seconds=0.05)


@pytest.fixture
async def open_memory(config: STMConfig, clock: Clock) -> AsyncIterator[Opener]:
    """Open a memory on the test's database (call again after close() for a restart)."""
    opened: list[ShortTermMemory] = []

    async def opener(**overrides: object) -> ShortTermMemory:
        cfg = config.model_copy(update=overrides) if overrides else config
        memory = await ShortTermMemory.open(cfg, clock=clock)
        opened.append(memory)
        return memory

    yield opener
    for memory in opened:
        await memory.close()


@pytest.fixture
async def memory(open_memory: Opener) -> ShortTermMemory:
    return await open_memory()


# -- PostgreSQL ---------------------------------------------------------------------------
# The tests of both stores create one database per run on the server STM_TEST_POSTGRES
# names (default: the local server, trust authentication), one schema per test in it, and
# drop the database at the end. Without a reachable server those tests skip, unless
# STM_TEST_REQUIRE_POSTGRES is set (CI sets it): then they fail, so a run that lost its
# server cannot pass green with half its coverage skipped.
POSTGRES_ADMIN = os.environ.get(
    "STM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
POSTGRES_HOW = (
    "PostgreSQL tests need a server: start one (e.g. `pg_ctlcluster 15 main start`) with "
    "trust authentication on 127.0.0.1:5432, or set STM_TEST_POSTGRES to a superuser DSN, "
    "and `pip install asyncpg`"
)


def _with_database(dsn: str, database: str) -> str:
    base, _, query = dsn.partition("?")
    head, sep, rest = base.partition("://")
    host = rest.partition("/")[0]
    return f"{head}{sep}{host}/{database}" + (f"?{query}" if query else "")


def _with_search_path(dsn: str, schema: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + f"search_path={schema}"


def _run(coroutine: Any) -> Any:
    """Run ``coroutine`` to the end on a loop of its own, in a thread of its own: callable
    from fixtures and from inside a running test alike, leaving the test's loop alone."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_ADMIN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str | None]:
    """The DSN of a database made for this run (dropped at the end), or None."""
    name = f"stm_test_{secrets.token_hex(6)}"
    try:
        _run(_admin(f"CREATE DATABASE {name}"))
    except Exception as exc:  # no asyncpg, no server, no rights: the PG tests skip
        if os.environ.get("STM_TEST_REQUIRE_POSTGRES"):
            raise RuntimeError(
                f"STM_TEST_REQUIRE_POSTGRES is set but no PostgreSQL answered: "
                f"{type(exc).__name__}: {exc}. {POSTGRES_HOW}"
            ) from exc
        yield None
        print(f"PostgreSQL tests skipped: {type(exc).__name__}: {exc}")
        return
    try:
        yield _with_database(POSTGRES_ADMIN, name)
    finally:
        _run(_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _new_schema(postgres_database: str) -> str:
    """A DSN whose tables live in a new schema of their own."""
    schema = f"t_{secrets.token_hex(6)}"

    async def create() -> None:
        import asyncpg

        conn = await asyncpg.connect(postgres_database)
        try:
            await conn.execute(f"CREATE SCHEMA {schema}")
        finally:
            await conn.close()

    _run(create())
    return _with_search_path(postgres_database, schema)


@pytest.fixture
def postgres_url(postgres_database: str | None) -> str:
    """A DSN whose tables live in a schema of their own, for this test only."""
    if postgres_database is None:
        pytest.skip(POSTGRES_HOW)
    return _new_schema(postgres_database)


STORE_KINDS = ["sqlite", "postgres"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module that sets ``BOTH_STORES = True`` runs each of its tests once per store:
    those that use ``store`` or ``config`` (and so ``open_memory`` and ``memory``). A
    test that asks for ``db_path`` inspects the SQLite file itself and runs on SQLite.
    ``SLOW_ON_POSTGRES = True`` marks the PostgreSQL cases ``slow`` (the deep run, ``-m slow``)."""
    if (
        getattr(metafunc.module, "BOTH_STORES", False)
        and "store_kind" in metafunc.fixturenames
        and "db_path" not in inspect.signature(metafunc.function).parameters
    ):
        kinds: list[Any] = list(STORE_KINDS)
        if getattr(metafunc.module, "SLOW_ON_POSTGRES", False):
            # Much slower on PostgreSQL (a database per case): the deep run only.
            kinds = [
                k if k != "postgres" else pytest.param(k, marks=pytest.mark.slow) for k in kinds
            ]
        metafunc.parametrize("store_kind", kinds, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules holding long tests (``slow`` or ``process``) first, each whole and in
    its own order: the workers start on those, and the short ones fill in after, instead of
    one worker running a minute-long test alone at the end of the run."""
    heavy = {
        item.module
        for item in items
        if item.get_closest_marker("slow") or item.get_closest_marker("process")
    }
    items.sort(key=lambda item: item.module not in heavy)  # stable: order kept within


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    """``sqlite``, unless the module runs its tests on both stores."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store_database(store_kind: str, request: pytest.FixtureRequest, db_path: Path) -> str:
    """The ``database`` setting of a fresh store of the test's kind."""
    if store_kind == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(db_path)


@pytest.fixture
def fresh_database(
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[str], str]:
    """Make another empty database of the test's kind; the name tells SQLite files apart."""
    if store_kind == "postgres":
        database = request.getfixturevalue("postgres_database")
        if database is None:
            pytest.skip(POSTGRES_HOW)
        return lambda name: _new_schema(database)
    return lambda name: str(tmp_path / f"{name}.sqlite3")


@pytest.fixture
def example_database(
    store_kind: str, fresh_database: Callable[[str], str]
) -> Callable[[], contextlib.AbstractContextManager[str]]:
    """A new database of the test's kind for each example of a property test: a schema of
    its own on PostgreSQL, a file in a new temporary folder on SQLite (in RAM where there
    is a RAM disk: every upgrade waits for a durable commit)."""
    made = itertools.count()

    @contextlib.contextmanager
    def database() -> Iterator[str]:
        if store_kind != "sqlite":
            yield fresh_database(f"example{next(made)}")
            return
        shm = Path("/dev/shm")
        with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder:
            yield str(Path(folder) / "stm.sqlite3")

    return database


@pytest.fixture
def open_bot(store_kind: str, fresh_database: Callable[[str], str], tmp_path: Path) -> BotOpener:
    """Open a bot with the cog over a database of the test's store: ``open_bot()`` the
    test's own (the same one each time it is opened again), ``open_bot("two")`` another."""
    from discord_fakes import harness

    databases: dict[str, str] = {}

    def opened(name: str = "stm", **settings: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        if name not in databases:
            databases[name] = fresh_database(name)
        return harness(tmp_path, database=databases[name], **settings)

    return opened


@pytest.fixture
async def open_store_(store_database: str) -> AsyncIterator[StoreOpener]:
    """Open a store on the test's database (again for a second process's view)."""
    from stm.store import open_store

    opened: list[Any] = []

    async def opener() -> Any:
        store = await open_store(STMConfig(database=store_database))
        opened.append(store)
        return store

    yield opener
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store_: StoreOpener) -> Any:
    """An open store of each kind (the test runs once per kind)."""
    return await open_store_()
