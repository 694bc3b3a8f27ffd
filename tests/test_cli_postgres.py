"""The operator command line against PostgreSQL: the same commands and the same refusals
as on SQLite (tests/test_cli.py), on a schema of the local server.

Without a reachable server these tests skip, saying how to run them (conftest.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_cli import (
    TTLS,
    Run,
    make_database,
    one_line_error,
    pend,
    stm_at,
    stm_on_terminal_at,
    summary_of,
)

from stm.store._base import DeleteChannel, PurgeUser
from stm.store._postgres import MIGRATIONS
from stm.store._shred import open_sealed_text

SCHEMA = len(MIGRATIONS)


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    async def run() -> list[tuple[Any, ...]]:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            return [tuple(r) for r in await conn.fetch(sql, *params)]
        finally:
            await conn.close()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def rows(url: str) -> dict[str, str | None]:
    """Every row's summary, decrypted with its row's key (None once the key is destroyed)."""
    found = query(
        url,
        "SELECT m.key, m.summary, k.key FROM short_term_memories m "
        "LEFT JOIN stm_keys k ON k.slot = m.key_slot",
    )
    return {
        str(key): open_sealed_text(None if secret is None else bytes(secret), str(key), summary)  # type: ignore[arg-type]
        for key, summary, secret in found
    }


@pytest.fixture
async def pg(postgres_url: str) -> str:
    await make_database(postgres_url)
    return postgres_url


def test_stats_show_export_and_check(pg: str, tmp_path: Path) -> None:
    """The reading commands give the same answers as on SQLite, with the feed position."""
    data = stm_at(tmp_path, pg, "--json", "stats").json()
    assert isinstance(data, dict)
    assert data["entries_by_scope"] == {"server": 3, "user": 5}
    assert (data["servers"], data["users"], data["opted_out_users"]) == (2, 3, 1)
    assert isinstance(data["feed_position"], int) and data["feed_position"] > 0
    assert data["database"].startswith("postgresql://")
    shown = stm_at(tmp_path, pg, "--json", "show", "--user", "42").json()
    assert isinstance(shown, dict) and len(shown["entries"]) == 6
    channel = stm_at(tmp_path, pg, "show", "--channel", "10")
    assert channel.status == 0 and summary_of(7, 10) in channel.out
    key = stm_at(tmp_path, pg, "show", "shortterm:server:100:10")
    assert key.status == 0 and "7, 42" in key.out
    export = stm_at(tmp_path, pg, "export", "--user", "9").json()
    assert isinstance(export, dict) and export["opted_out"]["opted_out"] is True
    assert {e["summary"] for e in export["entries"]} == {summary_of(9, 30)}
    export = stm_at(tmp_path, pg, "export", "--user", "42").json()
    assert isinstance(export, dict) and export["needs_review"] is False
    assert {e["key"] for e in export["contributed_to"]} == {
        "shortterm:server:100:10", "shortterm:server:100:11", None,
    }  # fmt: skip
    assert all("summary" not in e for e in export["contributed_to"])
    check = stm_at(tmp_path, pg, "--json", "check")
    assert check.status == 0, check.err
    assert check.json() == {
        "database": check.json()["database"],  # type: ignore[index]
        "ok": True,
        "integrity": ["ok"],
        "foreign_keys": [],
        "schema_version": SCHEMA,
        "code_schema_version": SCHEMA,
    }


@pytest.mark.process
def test_a_purge_asks_on_a_terminal(pg: str, tmp_path: Path) -> None:
    """purge-user asks first on a terminal: 'n' changes nothing (status 1)."""
    before = rows(pg)
    no = stm_on_terminal_at(tmp_path, pg, "purge-user", "42", answer="n\n")
    assert no.status == 1 and rows(pg) == before


def test_purges_and_janitor(pg: str, tmp_path: Path) -> None:
    """purge-user refuses without a terminal or --yes, then has the library's semantics;
    purge-channel and the janitor work as on SQLite."""
    before = rows(pg)
    refused = stm_at(tmp_path, pg, "purge-user", "42")
    *shown, last = refused.err.strip().splitlines()
    assert shown and "A purge of user 42" in shown[0]  # what it would erase, first
    one_line_error(Run(refused.status, refused.out, last), "--yes")
    assert rows(pg) == before
    done = stm_at(tmp_path, pg, "--json", "purge-user", "42", "--yes")
    assert done.status == 0, done.err
    data = done.json()
    assert isinstance(data, dict) and data["entries_before"] == 6 and data["entries_now"] == 0
    expected = {
        "erasure": "direct",
        "own": 3,
        "shared": 3,
        "by_server": [
            {"server_id": 100, "shared": 3, "distilled": 5, "share": 0.6, "at_least": False}
        ],
    }
    assert data["preview"] == expected and data["erased"] == expected
    left = rows(pg)
    assert not [k for k in left if k.startswith("shortterm:user:42:")]
    assert left["shortterm:server:100:10"] is None
    assert left["shortterm:server:200:30"] == summary_of(9, 30)
    channel = stm_at(tmp_path, pg, "--json", "purge-channel", "30", "--yes")
    assert channel.status == 0, channel.err
    assert not [k for k in rows(pg) if k.endswith(":30")]
    dry = stm_at(tmp_path, pg, "--json", "janitor", "--dry-run", *TTLS)
    assert dry.json() == {"expired": 0, "deleted": 0, "dry_run": True}


def test_show_and_export_leave_out_what_a_pending_delete_erases(pg: str, tmp_path: Path) -> None:
    """As on SQLite: what deletes waiting in the journal erase or clear is not shown as
    held (the journal named by STM_JOURNAL, as a bot on this machine would keep it)."""
    journal = tmp_path / "pending"
    pend(journal, PurgeUser(42, 100, "direct"), DeleteChannel(30))
    env = {"STM_JOURNAL": str(journal)}
    export = stm_at(tmp_path, pg, "export", "--user", "42", **env).json()
    assert isinstance(export, dict)
    assert [e["key"] for e in export["entries"]] == ["shortterm:user:42:20"]
    assert export["contributed_to"] == [] and export["pending_deletes"]["left_out"] == 5
    channel = stm_at(tmp_path, pg, "--json", "show", "--channel", "30", **env).json()
    assert isinstance(channel, dict) and channel["entries"] == []
    assert len(rows(pg)) == 8  # applied at the next open, not by a read


def test_migrate_and_missing_schema(postgres_url: str, tmp_path: Path) -> None:
    """An empty schema is no database: every command says so and creates nothing;
    migrate --create makes the tables, then the commands work."""
    for args in (("stats",), ("export", "--user", "1"), ("purge-user", "1", "--yes"), ("migrate",)):
        one_line_error(stm_at(tmp_path, postgres_url, *args), "nothing was created")
    assert (
        query(postgres_url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        == []
    )
    created = stm_at(tmp_path, postgres_url, "--json", "migrate", "--create")
    assert created.status == 0, created.err
    assert stm_at(tmp_path, postgres_url, "migrate").out.strip().endswith("nothing to do")
    assert stm_at(tmp_path, postgres_url, "check").status == 0


def test_a_newer_schema_is_refused(pg: str, tmp_path: Path) -> None:
    """A schema from a newer version is refused: one line, status 1, nothing changed."""
    before = rows(pg)
    query(pg, "UPDATE stm_schema SET version = $1", SCHEMA + 1)
    for args in (("stats",), ("purge-user", "42", "--yes"), ("migrate",), ("check",)):
        one_line_error(stm_at(tmp_path, pg, *args), f"schema version {SCHEMA + 1}", "newer")
    query(pg, "UPDATE stm_schema SET version = $1", SCHEMA)
    assert rows(pg) == before


LOCK_HOLDER = """
import asyncio, sys
import asyncpg

async def main():
    conn = await asyncpg.connect(sys.argv[1])
    async with conn.transaction():
        await conn.execute("LOCK TABLE short_term_memories IN ACCESS EXCLUSIVE MODE")
        print("locked", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await conn.close()

asyncio.run(main())
"""


@pytest.mark.process
def test_a_locked_table_is_named(pg: str, tmp_path: Path) -> None:
    """While another session holds the memories table locked, reads and purges give up
    after STM_BUSY_TIMEOUT_MS (as lock_timeout) with one line saying it is locked."""
    before = rows(pg)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, pg],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        for args in (("stats",), ("export", "--user", "42"), ("purge-user", "42", "--yes")):
            run = stm_at(tmp_path, pg, *args, STM_BUSY_TIMEOUT_MS="200")
            one_line_error(run, "is locked by another process")
    finally:
        holder.stdin.write("go\n")
        holder.stdin.close()
        holder.stdout.close()
        assert holder.wait(timeout=60) == 0
    assert rows(pg) == before
