"""The operator command line against files the library made.

Every command: its output for people and its ``--json`` for scripts, confirmation of
destructive commands, bad arguments, and databases that are missing, locked, corrupt or
newer than the code: one line, a non-zero exit status, and nothing created or changed.

Commands run in this process through click's CliRunner and the entry point's own error
handling, with stdin, stdout and stderr as a pipe gives them: not terminals. The tests
marked ``process`` run ``python -m stm`` as a real subprocess, for what only a process
shows: its exit status, and a real terminal (confirmation, colour, progress).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import pty
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stm import ShortTermMemory, STMConfig
from stm._journal import SUFFIX, Journal, Pending
from stm._tables import printable, table
from stm.cli import main
from stm.store import _sqlite as sqlite_store
from stm.store._base import DeleteChannel, Op, PurgeUser
from stm.store._sqlite import MIGRATIONS
from stm.testing import Clock, ctx, turn

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = len(MIGRATIONS)
PROG = "python -m stm"

# What the fixture database holds: user 42 in two channels of server 100 and a DM,
# user 7 in channel 10 with 42 (so the server's memory of channel 10 has both), and
# user 9 alone in server 200, opted out.
TURNS = [(42, 10, 100), (42, 11, 100), (7, 10, 100), (42, 20, None), (9, 30, 200)]


# The janitor judges expiry by the bot's TTLs, given explicitly (here the defaults).
TTLS = ("--crude-ttl-hours", "12", "--summary-ttl-hours", "24")


def summary_of(user: int, channel: int) -> str:
    return f"SUMMARY-{user}-{channel} boats and harbours"


@dataclass
class Run:
    status: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def environment(**extra: str) -> dict[str, str]:
    """The environment of a subprocess: no STM_* setting but ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STM_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def stm(db: Path | None, *args: str, stdin: str = "", **env: str) -> Run:
    """``python -m stm [--database db] args...`` in this process, run in db's folder."""
    cwd = _existing_folder(db) if db is not None else Path.cwd()
    return stm_at(cwd, None if db is None else str(db), *args, stdin=stdin, **env)


class _EntryPoint:
    """``stm.cli.main`` in the shape CliRunner invokes: the installed command's error
    handling, one-line messages and exit statuses."""

    name = "stm"

    def main(self, args: Sequence[str], prog_name: str, **extra: Any) -> None:
        main(list(args), prog_name=prog_name)


def stm_at(cwd: Path, database: str | None, *args: str, stdin: str = "", **env: str) -> Run:
    """``python -m stm [--database database] args...`` in this process, run in ``cwd``
    with no STM_* setting but ``env``."""
    command = [] if database is None else ["--database", database]
    settings: dict[str, str | None] = {k: None for k in os.environ if k.startswith("STM_")}
    settings.update(env)

    def invoke() -> Run:
        handlers = logging.root.handlers[:]
        try:
            with contextlib.chdir(cwd):
                result = CliRunner().invoke(
                    _EntryPoint(),  # type: ignore[arg-type]
                    [*command, *args],
                    input=stdin,
                    env=settings,
                    prog_name=PROG,
                    catch_exceptions=False,
                )
        finally:
            logging.root.handlers[:] = handlers  # the command adds its own
        return Run(result.exit_code, result.stdout, result.stderr)

    # A command runs its own event loop: in a thread, an async test can call it too.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(invoke).result()


def stm_process_at(cwd: Path, database: str | None, *args: str, stdin: str = "", **env: str) -> Run:
    """``python -m stm [--database database] args...`` as a subprocess, run in ``cwd``,
    with stdin a pipe."""
    command = [sys.executable, "-m", "stm"]
    if database is not None:
        command += ["--database", database]
    done = subprocess.run(
        [*command, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment(**env),
        timeout=120,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def stm_on_terminal(
    db: Path, *args: str, answer: str, stdout_tty: bool = False, stderr_tty: bool = False
) -> Run:
    """Run with stdin (and optionally stdout, stderr) on a pseudo-terminal; type ``answer``.
    What goes to the terminal comes back as ``out`` (or ``err``)."""
    return stm_on_terminal_at(
        db.parent, str(db), *args, answer=answer, stdout_tty=stdout_tty, stderr_tty=stderr_tty
    )


def stm_on_terminal_at(
    cwd: Path,
    database: str,
    *args: str,
    answer: str,
    stdout_tty: bool = False,
    stderr_tty: bool = False,
) -> Run:
    """``stm_on_terminal`` for any ``database`` setting, run in ``cwd``."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stm", "--database", database, *args],
            stdin=slave,
            stdout=slave if stdout_tty else subprocess.PIPE,
            stderr=slave if stderr_tty else subprocess.PIPE,
            cwd=cwd,
            env=environment(),
        )
        os.close(slave)
        slave = -1
        os.write(master, answer.encode())
        chunks: list[bytes] = []
        if stdout_tty or stderr_tty:
            with contextlib.suppress(OSError):  # EIO once the child closed its end
                while chunk := os.read(master, 65536):
                    chunks.append(chunk)
        out, err = proc.communicate(timeout=120)
        terminal = b"".join(chunks).decode()
        return Run(
            proc.returncode,
            terminal if stdout_tty else out.decode(),
            terminal if stderr_tty else err.decode(),
        )
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def rows(db: Path) -> dict[str, str | None]:
    """Every row's summary as the store reads it (distilled text is stored encrypted)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found = sqlite_store._select(conn, sqlite_store._SELECT, {})
    return {row.key: row.summary for row in found}


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


async def make_database(path: Path | str, clock: Clock | None = None) -> None:
    config = STMConfig(database=str(path))
    async with ShortTermMemory.open(config, clock=clock or Clock()) as memory:
        for user, channel, server in TURNS:
            c = ctx(user=user, channel=channel, server=server, channel_name=f"chan{channel}")
            await memory.capture(turn(c, f"hello from {user}"))
            result = await memory.run_tool(c, {"summary": summary_of(user, channel)})
            assert result.success, result.message
        await memory.set_user_opt_out(9, True)


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "stm.sqlite3"
    await make_database(path)
    return path


def one_line_error(run: Run, *words: str) -> None:
    assert run.status != 0, run
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("stm: error: "), run.err
    for word in words:
        assert word in lines[0], run.err


# -- reading ----------------------------------------------------------------------
def test_stats_counts_what_the_database_holds(db: Path) -> None:
    """stats counts entries by scope, servers, users, opt-outs and the schema; the table
    is aligned and has no colour codes when stdout is not a terminal."""
    found = stm(db, "--json", "stats")
    assert found.status == 0, found.err
    data = found.json()
    assert isinstance(data, dict)
    assert data["entries_by_scope"] == {"server": 3, "user": 5}
    assert data["entries"] == 8
    assert data["distilled"] == 8
    assert data["servers"] == 2
    assert data["users"] == 3
    assert data["expired"] == 0
    assert data["opted_out_users"] == 1
    assert data["schema_version"] == SCHEMA
    assert data["database_bytes"] >= db.stat().st_size > 0
    # Every change other processes must honour is in the feed: 5 upgrades, an opt-out.
    assert isinstance(data["feed_position"], int) and data["feed_position"] >= 6

    text = stm(db, "stats")
    assert text.status == 0
    assert "\x1b" not in text.out
    lines = text.out.splitlines()
    assert "entries" in text.out and "8 (server 3, user 5)" in text.out
    starts = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in lines}
    assert len(starts) == 1, lines  # every value starts in the same column


async def test_stats_counts_expired_and_near_expiry(tmp_path: Path) -> None:
    """Rows past their TTL are counted as expired, rows that pass it within the window as
    near expiry (the same rule as the library's janitor)."""
    path = tmp_path / "old.sqlite3"
    clock = Clock()
    clock.advance(hours=-30)  # summaries live 24 h: every row written then has expired
    await make_database(path, clock)
    async with ShortTermMemory.open(STMConfig(database=str(path)), clock=Clock()) as memory:
        c = ctx(user=5, channel=50, server=100)
        await memory.capture(turn(c, "new"))
        assert (await memory.run_tool(c, {"summary": "fresh"})).success
    data = stm(path, "--json", "stats", "--near-hours", "25").json()
    assert isinstance(data, dict)
    assert (data["expired"], data["near_expiry"]) == (8, 2)
    data = stm(path, "--json", "stats", "--near-hours", "1").json()
    assert isinstance(data, dict)
    assert (data["expired"], data["near_expiry"]) == (8, 0)


def test_show_a_key(db: Path) -> None:
    """show KEY prints one entry, its summary and whose words its notes' prompts showed;
    --json gives the same."""
    key = "shortterm:server:100:10"
    shown = stm(db, "show", key)
    assert shown.status == 0, shown.err
    assert summary_of(7, 10) in shown.out
    assert "7, 42" in shown.out
    data = stm(db, "--json", "show", key).json()
    assert data == {"entries": [_row(data, key)]}
    assert _row(data, key)["contributors"] == [7, 42]
    missing = stm(db, "show", "shortterm:server:100:99")
    one_line_error(missing, "nothing is held under shortterm:server:100:99")


def test_show_a_user_and_a_channel(db: Path) -> None:
    """--user lists the user's own entries and the shared ones they contributed to;
    --channel every scope of the channel; nothing of anyone else."""
    data = stm(db, "--json", "show", "--user", "42").json()
    keys = {entry["key"] for entry in _entries(data)}
    assert keys == {
        "shortterm:user:42:10",
        "shortterm:user:42:11",
        "shortterm:user:42:20",
        "shortterm:server:100:10",
        "shortterm:server:100:11",
        "shortterm:user:7:10",  # 42's turn was in its recall window when 7 upgraded
    }
    text = stm(db, "show", "--user", "42")
    assert text.status == 0
    assert "own entries: 3" in text.out and "contributed to: 3" in text.out
    assert summary_of(9, 30) not in text.out
    _assert_aligned(text.out)

    channel = stm(db, "--json", "show", "--channel", "10").json()
    assert {e["key"] for e in _entries(channel)} == {
        "shortterm:server:100:10",
        "shortterm:user:42:10",
        "shortterm:user:7:10",
    }
    opted = stm(db, "--json", "show", "--user", "9").json()
    assert isinstance(opted, dict) and opted["opted_out"]["opted_out"] is True


@pytest.mark.process
async def test_show_through_a_pipe_prints_every_line_whole(tmp_path: Path) -> None:
    """Piped (``show --user ID | cat``), a long note is printed whole, whatever COLUMNS
    says; on a terminal it is cut to the terminal's width."""
    db = tmp_path / "stm.sqlite3"
    long = "Ann plans a long trip: " + "Lisbon, Porto, Madrid, " * 12 + "and home."
    config = STMConfig(database=str(db))
    async with ShortTermMemory.open(config, clock=Clock()) as memory:
        c = ctx(user=42, channel=10, server=100)
        await memory.capture(turn(c, "hello"))
        assert (await memory.run_tool(c, {"summary": long})).success
    piped = stm(db, "show", "--user", "42", COLUMNS="80")
    assert piped.status == 0 and long in piped.out
    assert max(len(line) for line in piped.out.splitlines()) > 200
    on_terminal = stm_on_terminal(db, "show", "--user", "42", answer="", stdout_tty=True)
    assert on_terminal.status == 0 and long not in on_terminal.out


@pytest.mark.parametrize("bad", ["abc", "-5", "1.5", str(2**63)])
def test_an_id_that_is_not_one_is_answered_in_our_words(db: Path, bad: str) -> None:
    run = stm(db, "show", "--user", bad)
    one_line_error(run, "'--user'", "ids are whole numbers")
    assert run.status == 2 and "integer" not in run.err and "Invalid value" not in run.err


def test_stored_text_cannot_drive_the_terminal(db: Path) -> None:
    """A stored value holding escape sequences is shown with them made visible."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "UPDATE short_term_memories SET summary = ? WHERE key = ?",
            ("evil\x1b]0;owned\x07\x1b[2Jtext\nnext", "shortterm:user:42:10"),
        )
        conn.commit()
    for args in (("show", "shortterm:user:42:10"), ("show", "--user", "42")):
        shown = stm(db, *args)
        assert shown.status == 0
        assert "\x1b" not in shown.out and "\x07" not in shown.out
        assert "evil\\u001b]0;owned" in shown.out


def test_no_output_carries_a_raw_c1_control(db: Path) -> None:
    """Stored text holding C1 controls (the 8-bit CSI, OSC, DCS, NEL), DEL, line
    separators and bidi overrides: the JSON outputs escape them (and read back as the
    stored text), the outputs for people show them as marks."""
    evil = "a\x9b2Jb\x9d0;owned\x9c\x90q\x85\x7f\u2028\u202ez"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "UPDATE short_term_memories SET summary = ?, channel_name = ?, server_name = ?",
            (evil, evil, evil),
        )
        conn.commit()
    runs = [
        ("show", "shortterm:user:42:10"),
        ("show", "--user", "42"),
        ("show", "--channel", "10"),
        ("export", "--user", "42"),
        ("export", "--user", "42", "--include-shared-text"),
    ]
    raw = [chr(c) for c in range(0x7F, 0xA0)] + ["\u2028", "\u202e"]
    for args in runs:
        for run in (stm(db, *args), stm(db, "--json", *args)):
            assert run.status == 0, run.err
            found = [f"U+{ord(ch):04X}" for ch in raw if ch in run.out]
            assert not found, (args, found)
    data = stm(db, "export", "--user", "42").json()
    assert isinstance(data, dict)
    assert {e["summary"] for e in data["entries"]} == {evil}
    assert {e["channel_name"] for e in data["entries"]} == {evil}


def test_export_a_user(db: Path) -> None:
    """export --user gives what is held about the user as JSON: their own entries in full;
    of the shared entries their words may be in, where and when only (no text, no other
    user's id, not even in a key); the opt-out, and what the database cannot hold."""
    run = stm(db, "export", "--user", "42")
    assert run.status == 0, run.err
    assert run.err == ""
    data = run.json()
    assert isinstance(data, dict)
    assert data["user_id"] == 42 and data["needs_review"] is False and "review" not in data
    assert {e["summary"] for e in data["entries"]} == {
        summary_of(42, 10),
        summary_of(42, 11),
        summary_of(42, 20),
    }
    shared = data["contributed_to"]
    # The server's notes of channels 10 and 11, and user 7's own entry of channel 10.
    assert sorted((e["scope"], e["key"], e["channel_id"]) for e in shared) == [
        ("server", "shortterm:server:100:10", 10),
        ("server", "shortterm:server:100:11", 11),
        ("user", None, 10),
    ]
    assert all(
        set(e) == {"key", "scope", "server_id", "channel_id", "parent_channel_id",
                   "persona_id", "updated_at", "expires_at"}
        for e in shared
    )  # fmt: skip
    assert all(e["server_id"] == 100 for e in shared)
    assert "direct" in data["contributed_to_means"]
    # Nothing of user 7 leaves: their text, their key, their id.
    assert summary_of(7, 10) not in run.out and "user:7" not in run.out
    assert '"user_id": 7' not in run.out
    assert all("contributors" not in e for e in data["entries"])
    assert data["opted_out"] == {"opted_out": False, "since": None}
    assert "recent messages" in data["not_included"]
    assert summary_of(9, 30) not in run.out
    nine = stm(db, "export", "--user", "9").json()
    assert isinstance(nine, dict) and nine["opted_out"]["opted_out"] is True


def pend(journal: Path, *ops: Op) -> None:
    """Leave ``ops`` waiting in the pending-change journal, as a process that could not
    commit them does."""
    writing = Journal(journal)
    writing.append([Pending(writing.new_id(), op) for op in ops])


def test_show_and_export_leave_out_what_a_pending_delete_erases(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A purge of user 42 in server 100 and a clear of channel 30 wait in the journal
    (the database could not take them yet): show and export do not present what they
    erase or clear as held, and say so; what they do not reach is shown as before, and
    the rows stay in the file until the next open applies the deletes. Reading the
    journal is not replaying it, and is not logged as if it were."""
    before = rows(db)
    pend(Path(f"{db}{SUFFIX}"), PurgeUser(42, 100, "direct"), DeleteChannel(30))
    with caplog.at_level(logging.INFO, logger="stm"):
        export = stm(db, "export", "--user", "42").json()
    assert "replaying" not in caplog.text
    assert isinstance(export, dict)
    assert [e["key"] for e in export["entries"]] == ["shortterm:user:42:20"]  # the DM
    assert export["contributed_to"] == []
    assert export["pending_deletes"]["deletes"] == 2
    assert export["pending_deletes"]["left_out"] == 5
    user = stm(db, "--json", "show", "--user", "42").json()
    assert isinstance(user, dict)
    assert [e["key"] for e in user["entries"]] == ["shortterm:user:42:20"]
    channel = stm(db, "--json", "show", "--channel", "30").json()
    assert isinstance(channel, dict) and channel["entries"] == []
    assert channel["pending_deletes"]["left_out"] == 2
    text = stm(db, "show", "--user", "42")
    assert text.status == 0 and summary_of(42, 10) not in text.out
    assert summary_of(42, 20) in text.out
    assert "left out: 5 entries that pending deletes" in text.out
    one_line_error(stm(db, "show", "shortterm:user:42:10"), "nothing is held", "pending deletes")
    assert "shortterm:user:42:20" in stm(db, "show", "shortterm:user:42:20").out
    assert rows(db) == before


def test_export_with_shared_text_is_marked_for_review(db: Path) -> None:
    """--include-shared-text adds the shared entries' text, says at the top of the output
    that it needs review before it is sent, and warns on stderr."""
    run = stm(db, "export", "--user", "42", "--include-shared-text")
    assert run.status == 0, run.err
    data = run.json()
    assert isinstance(data, dict)
    assert data["needs_review"] is True and "remove what is not the user's" in data["review"]
    assert run.err.startswith("warning: contributed_to holds the text of shared entries")
    assert summary_of(7, 10) in {e["summary"] for e in data["contributed_to"]}
    assert all("categories" in e for e in data["contributed_to"])
    assert {e["key"] for e in data["contributed_to"]} == {
        "shortterm:server:100:10", "shortterm:server:100:11", None,
    }  # fmt: skip


def test_check_a_sound_and_a_damaged_database(db: Path) -> None:
    """check passes a sound file; a row pinning notes of a chain that is not there makes it
    fail with status 1."""
    good = stm(db, "--json", "check")
    assert good.status == 0, good.err
    assert good.json() == {
        "database": str(db),
        "ok": True,
        "integrity": ["ok"],
        "foreign_keys": [],
        "schema_version": SCHEMA,
        "code_schema_version": SCHEMA,
    }
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE short_term_memories SET chain_id = 999999 WHERE id = 1")
        conn.commit()
    bad = stm(db, "check")
    assert bad.status == 1
    assert "FAILED" in bad.out and "stm_chains" in bad.out
    data = stm(db, "--json", "check").json()
    assert isinstance(data, dict) and data["ok"] is False and len(data["foreign_keys"]) == 1


@pytest.mark.process
def test_colour_only_on_a_terminal(db: Path) -> None:
    """The same command is coloured on a terminal and plain through a pipe."""
    piped = stm(db, "check")
    assert "\x1b[" not in piped.out and "ok" in piped.out
    shown = stm_on_terminal(db, "check", answer="", stdout_tty=True)
    assert shown.status == 0
    assert "\x1b[32mok" in shown.out


@pytest.mark.process
def test_progress_only_on_a_terminal(db: Path) -> None:
    """A purge says what it is waiting for on a terminal's stderr, and nothing of it
    through a pipe."""
    shown = stm_on_terminal(db, "purge-channel", "10", "--yes", answer="", stderr_tty=True)
    assert shown.status == 0, shown.err
    assert "purge of channel 10…" in shown.err
    piped = stm(db, "purge-channel", "11", "--yes")
    assert piped.status == 0 and "…" not in piped.err + piped.out


# -- changing -----------------------------------------------------------------------
@pytest.mark.process
def test_purge_user_asks_first(db: Path) -> None:
    """purge-user asks on a terminal: 'n' changes nothing (status 1), 'y' purges; without
    a terminal and without --yes it refuses and changes nothing."""
    before = rows(db)
    no = stm_on_terminal(db, "purge-user", "42", answer="n\n")
    assert no.status == 1
    assert f"A purge of user 42 everywhere in {db} erases:" in no.err
    assert "  the user's own entries: 3\n" in no.err.replace("\r\n", "\n")
    assert "(erasure policy direct): 3" in no.err
    assert "    server 100: 3 of its 5 distilled entries (60%)" in no.err
    assert "Erase user 42's short-term memory everywhere (6 entries)" in no.err
    assert no.err.rstrip().endswith("Nothing was changed.") and "error" not in no.err
    assert rows(db) == before
    piped = stm(db, "purge-user", "42", stdin="y\n")
    # Without a terminal it shows what it would erase, then refuses in one line.
    assert f"A purge of user 42 everywhere in {db} erases:" in piped.err
    assert "    server 100: 3 of its 5 distilled entries (60%)" in piped.err
    *shown, refused = piped.err.strip().splitlines()
    assert shown and "error" not in "".join(shown)
    one_line_error(Run(piped.status, piped.out, refused), "--yes", "not a terminal")
    assert rows(db) == before
    yes = stm_on_terminal(db, "purge-user", "42", answer="y\n")
    assert yes.status == 0, yes.err
    assert (
        "purged user 42 everywhere: 6 entries erased or cleared (3 of their own, the notes "
        "of 3 shared); durable" in yes.out
    )
    _assert_user_42_purged(db, server=None)


def test_purge_user_with_yes_and_json(db: Path) -> None:
    """--yes purges without asking; --json reports it once durable, with what it said it
    would erase and what it erased: the user's own entries, and the shared ones by server
    out of the server's distilled entries (the same counts, as nothing happened between)."""
    run = stm(db, "--json", "purge-user", "42", "--yes")
    assert run.status == 0, run.err
    data = run.json()
    assert isinstance(data, dict)
    assert data["durable"] is True and data["entries_before"] == 6 and data["entries_now"] == 0
    expected = {
        "erasure": "direct",
        "own": 3,
        "shared": 3,
        "by_server": [
            {"server_id": 100, "shared": 3, "distilled": 5, "share": 0.6, "at_least": False}
        ],
    }
    assert data["preview"] == expected and data["erased"] == expected
    assert data["commits"] >= 1
    assert (data["durable_write_failures"], data["durable_write_retries"]) == (0, 0)
    _assert_user_42_purged(db, server=None)


def test_purge_user_in_one_server(db: Path) -> None:
    """--server limits the purge to one server: the user's DM memory stays."""
    run = stm(db, "purge-user", "42", "--server", "100", "--yes")
    assert run.status == 0, run.err
    assert "in server 100: 5 entries erased or cleared (2 of their own, the notes of 3" in run.out
    _assert_user_42_purged(db, server=100)


@pytest.mark.process
def test_purge_channel(db: Path) -> None:
    """purge-channel asks, then erases every scope of the channel and leaves no trace."""
    before = rows(db)
    no = stm_on_terminal(db, "purge-channel", "10", answer="no\n")
    assert no.status == 1 and rows(db) == before
    yes = stm_on_terminal(db, "--json", "purge-channel", "10", answer="yes\n")
    assert yes.status == 0, yes.err
    data = json.loads(yes.out)
    assert data["entries_before"] == 3 and data["entries_now"] == 0 and data["durable"] is True
    left = rows(db)
    assert not [key for key in left if key.endswith(":10")]
    assert len(left) == len(before) - 3
    assert summary_of(7, 10).encode() not in file_bytes(db)


@pytest.fixture
async def expired(tmp_path: Path) -> Path:
    """A database whose rows have all expired but those of a turn in channel 50."""
    path = tmp_path / "old.sqlite3"
    clock = Clock()
    clock.advance(hours=-30)
    await make_database(path, clock)
    async with ShortTermMemory.open(STMConfig(database=str(path))) as memory:
        c = ctx(user=5, channel=50, server=100)
        await memory.capture(turn(c, "new"))
        assert (await memory.run_tool(c, {"summary": "fresh"})).success
    return path


def test_janitor(expired: Path) -> None:
    """janitor --dry-run counts expired rows and deletes nothing; janitor refuses without
    a terminal or --yes, then deletes them and nothing else."""
    path = expired
    before = rows(path)
    dry = stm(path, "--json", "janitor", "--dry-run", *TTLS)
    assert dry.json() == {"expired": 8, "deleted": 0, "dry_run": True}
    assert rows(path) == before
    assert "8 expired rows would be deleted" in stm(path, "janitor", "--dry-run", *TTLS).out
    refused = stm(path, "janitor", *TTLS)
    one_line_error(refused, "--yes")
    assert rows(path) == before
    done = stm(path, "--json", "janitor", "--yes", *TTLS)
    assert done.status == 0, done.err
    data = done.json()
    assert isinstance(data, dict) and data["deleted"] == 8
    assert set(rows(path)) == {"shortterm:user:5:50", "shortterm:server:100:50"}


@pytest.mark.process
def test_janitor_asks_on_a_terminal(expired: Path) -> None:
    """janitor asks on a terminal; 'n' deletes nothing (status 1)."""
    before = rows(expired)
    no = stm_on_terminal(expired, "janitor", *TTLS, answer="n\n")
    assert no.status == 1 and "Delete 8 expired rows" in no.err and rows(expired) == before


def test_janitor_judges_expiry_by_the_bots_ttls_not_the_shells(
    expired: Path, tmp_path: Path
) -> None:
    """Without the bot's TTLs (flags or the bot's env file) the janitor refuses, with
    status 2, whatever STM_* TTLs this shell has; with them, it deletes by them alone."""
    before = rows(expired)
    shell = {"STM_CRUDE_TTL_HOURS": "1", "STM_SUMMARY_TTL_HOURS": "1"}
    for args in (("--yes",), ("--dry-run",), ("--yes", "--crude-ttl-hours", "1")):
        refused = stm(expired, "janitor", *args, **shell)
        one_line_error(refused, "--crude-ttl-hours", "--env-file", "STM_SUMMARY_TTL_HOURS")
        assert refused.status == 2
    assert rows(expired) == before
    # The bot keeps its rows 48 hours: those 30 hours old are live, whatever the shell says.
    bot_env = tmp_path / "bot.env"
    bot_env.write_text("STM_CRUDE_TTL_HOURS=48\nstm_summary_ttl_hours=48\n")
    kept = stm(expired, "--json", "janitor", "--yes", "--env-file", str(bot_env), **shell)
    assert kept.status == 0, kept.err
    assert kept.json()["deleted"] == 0 and rows(expired) == before  # type: ignore[index]
    flags = ("--crude-ttl-hours", "48", "--summary-ttl-hours", "48")
    dry = stm(expired, "--json", "janitor", "--dry-run", *flags, **shell).json()
    assert dry == {"expired": 0, "deleted": 0, "dry_run": True}
    bot_env.write_text("STM_SUMMARY_TTL_HOURS=-3\n")
    bad = stm(expired, "janitor", "--yes", "--env-file", str(bot_env))
    one_line_error(bad, "STM_SUMMARY_TTL_HOURS", str(bot_env))
    assert bad.status == 2 and rows(expired) == before
    # A file without TTLs means the library's defaults (12 and 24 hours), as for the bot.
    bot_env.write_text("STM_DATABASE=elsewhere.db\n")
    done = stm(expired, "--json", "janitor", "--yes", "--env-file", str(bot_env), **shell)
    assert done.json()["deleted"] == 8  # type: ignore[index]


async def test_migrate(tmp_path: Path) -> None:
    """migrate brings an older file to this schema, says when there is nothing to do,
    creates a database only with --create, and never touches a file of other tables."""
    missing = tmp_path / "new.sqlite3"
    one_line_error(stm(missing, "migrate"), "--create", "nothing was created")
    assert not missing.exists()
    created = stm(missing, "--json", "migrate", "--create")
    assert created.json() == {"database": str(missing), "created": True, "from": None, "to": SCHEMA}
    again = stm(missing, "migrate")
    assert again.status == 0 and "nothing to do" in again.out
    old = tmp_path / "old.sqlite3"
    sqlite3.connect(old).close()
    old.write_bytes(b"")  # an empty file is a database of schema version 0
    assert f"from schema version 0 to {SCHEMA}" in stm(old, "migrate").out
    assert stm(old, "check").status == 0
    other = tmp_path / "other.sqlite3"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    one_line_error(stm(other, "migrate"), "not a short-term memory database")
    with contextlib.closing(sqlite3.connect(other)) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert names == ["accounts"]


# -- what goes wrong ---------------------------------------------------------------
COMMANDS = [
    ("stats",),
    ("show", "shortterm:user:42:10"),
    ("show", "--user", "42"),
    ("show", "--channel", "10"),
    ("export", "--user", "42"),
    ("purge-user", "42", "--yes"),
    ("purge-channel", "10", "--yes"),
    ("janitor", "--dry-run", *TTLS),
    ("janitor", "--yes", *TTLS),
    ("migrate",),
    ("check",),
]
# A missing file is tried with every command. The other faults with a few: every command
# opens the file read-only first (the destructive ones to preview what they would do),
# and only these differ in what they do next.
DOORS = [
    ("stats",),
    ("export", "--user", "42"),
    ("purge-user", "42", "--yes"),
    ("migrate",),
    ("check",),
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_missing_database_is_never_created(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Every command on a missing file: one line naming it, status 1, no file made."""
    path = tmp_path / "data" / "stm.sqlite3"
    run = stm(path, "--json", *args)
    one_line_error(run, str(path), "nothing was created")
    assert run.out == ""
    assert not (tmp_path / "data").exists()


def test_an_error_line_carries_no_raw_control(tmp_path: Path) -> None:
    """A database name holding C1 controls is shown with them made visible, whatever
    the error quotes it with."""
    for name in (str(tmp_path / "x\x9b2J\x9d0;y.sqlite3"), "postgresql://u@127.0.0.1:1/x\x9b2J"):
        run = stm(None, "--database", name, "stats")
        one_line_error(run)
        assert "2J" in run.err
        assert not any(chr(c) in run.err for c in range(0x7F, 0xA0)), run.err


@pytest.mark.parametrize("args", DOORS, ids=" ".join)
def test_a_corrupt_database_is_named(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A file that is not a database: one line saying so, status 1, the file untouched."""
    path = tmp_path / "stm.sqlite3"
    garbage = b"not a database " * 700
    path.write_bytes(garbage)
    one_line_error(stm(path, *args), "corrupt or not a database")
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stm.sqlite3"]


@pytest.mark.parametrize("args", DOORS, ids=" ".join)
def test_a_newer_database_is_refused(db: Path, args: tuple[str, ...]) -> None:
    """A file from a newer schema: one line naming both versions, status 1, unchanged."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA + 1}")
    before = rows(db)
    one_line_error(stm(db, *args), f"schema version {SCHEMA + 1}", "newer")
    assert rows(db) == before


@contextlib.contextmanager
def locked(path: Path, mode: str) -> Iterator[None]:
    """Another connection holds the file's lock (``exclusive``: readers are shut out
    too). SQLite locks a file against the other connections of its own process as
    against other processes."""
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        if mode == "exclusive":
            holder.execute("PRAGMA locking_mode = EXCLUSIVE")
            holder.execute("BEGIN EXCLUSIVE")
        else:
            holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


@pytest.mark.parametrize("args", DOORS, ids=" ".join)
def test_a_locked_database_is_named(db: Path, args: tuple[str, ...]) -> None:
    """A file another connection holds locked: one line saying so, status 1, nothing
    done."""
    before = rows(db)
    with locked(db, "exclusive"):
        run = stm(db, *args, STM_BUSY_TIMEOUT_MS="100")
    one_line_error(run, "is locked by another process")
    assert rows(db) == before


@pytest.mark.parametrize("args", [("purge-user", "42", "--yes"), ("purge-channel", "10", "--yes")])
def test_a_purge_blocked_by_a_writer_is_not_acknowledged(db: Path, args: tuple[str, ...]) -> None:
    """While another connection holds the write lock, a purge says it is not durable
    (one line, status 1) instead of claiming success; reads go on meanwhile (WAL)."""
    before = rows(db)
    with locked(db, "write"):
        assert stm(db, "stats", STM_BUSY_TIMEOUT_MS="100").status == 0
        run = stm(db, *args, STM_BUSY_TIMEOUT_MS="100", STM_DELETE_RETRY_SECONDS="0.05")
    one_line_error(run, "not durable", "locked")
    assert rows(db) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("show", "--user", "abc"), ["--user", "abc"]),
        (("show",), ["exactly one of KEY, --user ID or --channel ID"]),
        (("show", "shortterm:channel:1"), ["not a short-term memory key"]),
        (("purge-user",), ["Missing argument 'ID'"]),
        (("purge-channel", "18446744073709551616", "--yes"), ["18446744073709551616"]),
        (("export",), ["--user"]),
        (("frobnicate",), ["No such command 'frobnicate'"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_bad_arguments(db: Path, args: tuple[str, ...], words: list[str]) -> None:
    """A bad argument: one line naming it and the help to read, status 2, nothing done."""
    before = rows(db)
    run = stm(db, *args)
    assert run.status == 2, run
    one_line_error(run, *words, "--help")
    assert run.out == ""
    assert rows(db) == before


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_bad_setting_is_named(db: Path, args: tuple[str, ...]) -> None:
    """A bad STM_* setting is one line naming the variable, whatever the command, and
    nothing is changed."""
    before = rows(db)
    run = stm(db, *args, STM_BUSY_TIMEOUT_MS="soon")
    one_line_error(run, "STM_BUSY_TIMEOUT_MS")
    assert rows(db) == before


def test_the_settings_name_the_database(db: Path) -> None:
    """Without --database the command reads STM_DATABASE, like the library."""
    run = stm(None, "--json", "stats", STM_DATABASE=str(db))
    assert run.status == 0, run.err
    data = run.json()
    assert isinstance(data, dict) and data["database"] == str(db)


def test_installed_as_a_console_script() -> None:
    """The package installs the command line as ``discord-stm``."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["scripts"]["discord-stm"] == "stm.cli:main"
    assert any(dep.startswith("click") for dep in project["dependencies"])
    help_ = stm(None, "--help")
    assert help_.status == 0
    for command in ("stats", "show", "export", "purge-user", "purge-channel", "janitor"):
        assert command in help_.out
    assert "migrate" in help_.out and "check" in help_.out


@pytest.mark.process
def test_a_process_exits_with_the_commands_status(db: Path) -> None:
    """``python -m stm`` as a process: status 0 when done, 1 when a command fails or
    finds a problem, 2 for a bad argument; each failure one line on stderr."""
    done = stm_process_at(db.parent, str(db), "--json", "stats")
    assert done.status == 0, done.err
    assert isinstance(done.json(), dict) and done.err == ""
    missing = stm_process_at(db.parent, str(db), "show", "shortterm:server:100:99")
    assert missing.status == 1
    one_line_error(missing, "nothing is held under shortterm:server:100:99")
    bad = stm_process_at(db.parent, str(db), "frobnicate")
    assert bad.status == 2 and bad.out == ""
    one_line_error(bad, "No such command 'frobnicate'", "--help")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE short_term_memories SET chain_id = 999999 WHERE id = 1")
        conn.commit()
    damaged = stm_process_at(db.parent, str(db), "check")
    assert damaged.status == 1 and "FAILED" in damaged.out
    help_ = stm_process_at(db.parent, None, "--help")
    assert help_.status == 0 and "purge-user" in help_.out


def test_table_and_printable_helpers() -> None:
    """Columns line up with wide characters; controls never reach the terminal raw."""
    lines = table(["A", "B"], [["日本", "x"], ["abc", "y"]])
    assert lines == ["A     B", "日本  x", "abc   y"]
    assert printable("a\x1b[31mb\nc") == "a\\u001b[31mb ⏎ c"


# -- helpers ------------------------------------------------------------------------
def _existing_folder(path: Path) -> Path:
    """The nearest folder of ``path`` that exists (a missing database's may not)."""
    return next(p for p in path.parents if p.exists())


def _assert_aligned(out: str) -> None:
    """In each table, every column starts where its header does."""
    header: str | None = None
    checked = 0
    for line in out.splitlines():
        if line.startswith("KEY "):
            header = line
            continue
        if header is None or not line.startswith("shortterm:"):
            header = None
            continue
        for name in ("SERVER", "CHANNEL", "UPDATED", "EXPIRES", "MEMORY"):
            at = header.index(name)
            assert line[at - 2 : at] == "  " and line[at] != " ", (name, header, line)
            checked += 1
    assert checked


def _entries(data: object) -> list[dict[str, object]]:
    assert isinstance(data, dict)
    entries = data["entries"]
    assert isinstance(entries, list)
    return entries


def _row(data: object, key: str) -> dict[str, object]:
    return next(e for e in _entries(data) if e["key"] == key)


def _assert_user_42_purged(db: Path, server: int | None) -> None:
    """What the library's purge leaves: none of 42's own rows (in scope), shared summaries
    42 contributed to cleared, 42's text nowhere in the file's bytes."""
    left = rows(db)
    in_scope = [(42, 10), (42, 11)] + ([(42, 20)] if server is None else [])
    for user, channel in in_scope:
        assert f"shortterm:user:{user}:{channel}" not in left
        assert summary_of(user, channel).encode() not in file_bytes(db)
    assert left["shortterm:server:100:10"] is None  # 42 contributed: cleared
    assert left["shortterm:user:7:10"] is None
    assert left["shortterm:server:200:30"] == summary_of(9, 30)
    if server is not None:
        assert left["shortterm:user:42:20"] == summary_of(42, 20)
    assert printable("x") == "x"


async def test_history_and_restore_undo_a_bad_update(tmp_path: Path) -> None:
    """A model's bad update undone by the operator: ``history`` lists the versions, ``restore``
    asks first and brings one back, and the next prompt shows the restored notes."""
    from stm.testing import ctx, turn

    db = tmp_path / "h.sqlite3"
    key = "shortterm:server:100:10"
    here = ctx(user=7, channel=10)
    async with ShortTermMemory.open(STMConfig(database=str(db))) as memory:
        await memory.capture(turn(here, "the ferry leaves at nine"))
        assert (await memory.run_tool(here, {"summary": "GOOD: the ferry leaves at nine"})).success
        later = ctx(user=7, channel=10)  # the next turn's update
        assert (await memory.run_tool(later, {"summary": "BAD: a joke about boats"})).success
    listed = stm(db, "--json", "history", key).json()
    assert isinstance(listed, dict)
    versions = {v["version"]: v for v in listed["versions"]}
    good = [n for n, v in versions.items() if "GOOD" in json.dumps(v)]
    assert len(good) == 1, listed
    shown = stm(db, "history", key)
    assert shown.status == 0 and "GOOD" in shown.out and "BAD" in shown.out, shown.err
    refused = stm(db, "restore", key, str(good[0]), stdin="n\n")
    assert refused.status != 0 and "GOOD" in refused.out + refused.err
    restored = stm(db, "restore", key, str(good[0]), "--yes")
    assert restored.status == 0, restored.err
    async with ShortTermMemory.open(STMConfig(database=str(db))) as memory:
        prompt = str(await memory.build_context(ctx(user=8, channel=10)))
    assert "GOOD: the ferry leaves at nine" in prompt and "BAD" not in prompt
