"""Both stores' schemas, side by side: their migrations in order, and what opening an
existing database checks of the version it records.

The tables are the same on both (``_base.py`` and ``_chains.py`` describe them);
the types are each database's own (SQLite's ``INTEGER`` flags, PostgreSQL's
``BIGINT`` ids and ``BOOLEAN``). A migration, once released, never changes: a
database records how many it ran (SQLite's ``user_version``, PostgreSQL's
``stm_schema``) and runs the ones after.
"""

from __future__ import annotations

import sqlite3

from .._errors import SchemaVersionError, StoreError
from .._expiry import DISTILLED_SQL
from . import _shred as shred

__all__ = [
    "POSTGRES_MIGRATIONS",
    "POSTGRES_SEALING",
    "SQLITE_MIGRATIONS",
    "check_version",
    "newer",
    "statements",
]

# The last migration, the same in both dialects: how many distilled rows a server holds,
# counted from an index (a purge's share); the chains a purge's plan is following, found
# without a scan of its ranges; the servers a purge everywhere may reach while planned.
_PURGE_STEPS = """
    CREATE INDEX stm_distilled_by_server ON short_term_memories (server_id)
        WHERE chain_id IS NOT NULL;
    CREATE INDEX stm_ranges_expanding ON stm_purge_ranges (position, expanded);
    ALTER TABLE stm_purges ADD COLUMN servers TEXT;
    """
# The server of each membership's chain beside it, so that where a purge everywhere may
# reach is a few searches of an index, one per server, not a lookup per membership. None
# in DMs, and in rows a process of an earlier version adds: a purge looks those up.
_MEMBER_SERVERS = """
    ALTER TABLE stm_chain_members ADD COLUMN server_id BIGINT;
    UPDATE stm_chain_members SET server_id =
        (SELECT c.server_id FROM stm_chains c WHERE c.id = stm_chain_members.chain_id);
    CREATE INDEX stm_members_by_server ON stm_chain_members (member, server_id);
    """
# What the pages of a purge have counted of the servers they reach (see
# ``chains._counted_by_pages``): each page counts on from where the last stopped, in the
# order of an index that holds all a count reads.
_PURGE_COUNTS = """
    ALTER TABLE stm_purges ADD COLUMN counted TEXT;
    DROP INDEX stm_distilled_by_server;
    CREATE INDEX stm_distilled_by_server ON short_term_memories (server_id, chain_id, id)
        WHERE chain_id IS NOT NULL;
    """
# Each row's ``updated_at`` in 15-minute slots (``SLOT_SECONDS``), which the indexes by
# time hold instead of ``updated_at`` itself: a row's write-behind, which moves
# ``updated_at`` every turn, then changes no indexed value within a slot, and PostgreSQL
# updates the row in place (a heap-only update, where its page has room; W6 measured
# smaller files at the default fillfactor than at 80) instead of adding an entry to each
# of its eight indexes until vacuum comes. The slot is a monotone function of
# ``updated_at``, so ordering by slot, then ``updated_at``, is ordering by ``updated_at``
# (a recall group's newest rows, ``ops._recent``).
SLOT_SECONDS = 900
# The janitor's index (``stm_by_updated``, dropped by ``_JANITOR_BY_ID``) held the slot
# and the id: SQLite's as its rowid; PostgreSQL's as a column of its own. With them, the
# ranges of purges not finished yet: every process looks for those every
# ``ABANDONED_PURGE_SECONDS``, and the ranges of finished purges stay until the feed is
# pruned past them.
_TIME_SLOTS = """
    DROP INDEX stm_by_updated;
    DROP INDEX stm_by_group;
    CREATE INDEX stm_by_updated ON short_term_memories ({by_updated});
    CREATE INDEX stm_by_group
        ON short_term_memories (scope, server_id, user_id, persona_id, updated_slot);
    CREATE INDEX stm_ranges_unfinished ON stm_purge_ranges (position) WHERE done <> 1;
    """

# A janitor pass reads the table in the order of its primary key (``ops._expire_chunk``),
# not by an index of times: every row's write-behind moved its entry in such an index as
# its time changed slot, and on PostgreSQL the index kept, between vacuums and after
# them, pages of entries of times the rows no longer had (W6: 770 KB for 1,673 rows).
_JANITOR_BY_ID = """
    DROP INDEX stm_by_updated;
    """

# The deletes in the change feed, the only changes a guard or a write-behind batch reads
# there: without it each read went through every change after its position, the upgrades
# of a busy server among them (thousands per read in W2). The list is GUARD_KINDS_SQL's as
# it stood (a released migration never changes; the reads name this list).
_FEED_DELETES = """
    CREATE INDEX stm_changes_deletes ON stm_changes (position)
        WHERE kind IN ('clear_channel', 'purge_user', 'delete_messages', 'edit_messages');
    """

# What a purge cleared, whichever processes carried out its steps: each step that clears
# adds its rows in its own transaction, so that whoever asked for the purge is told all of
# it (``chains._totals``).
_PURGE_CLEARED = """
    ALTER TABLE stm_purges ADD COLUMN cleared BIGINT NOT NULL DEFAULT 0;
    """

# Note history (``STMConfig.note_history``): the last few versions of each row's notes,
# their text sealed under the row's own key exactly as the row's (copied from the row as
# written), with when, whose turn and the version of the chain each was. Deleting a row,
# clearing its notes or changing its key deletes them all in the same statement's
# trigger: every erasure of the notes (a purge, a channel clear, expiry) reaches every
# version without knowing of them, and the key they were sealed under is destroyed with
# the row's. The feed's index of deletes takes restores, which guards read too.
_NOTE_HISTORY_SQLITE = """
    CREATE TABLE stm_note_versions (
        memory_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        key_slot INTEGER NOT NULL,
        chain_id INTEGER,
        chain_version INTEGER,
        summary BLOB,
        categories BLOB NOT NULL DEFAULT '{}',
        written_at REAL NOT NULL,
        written_by INTEGER,
        restored_from INTEGER,
        PRIMARY KEY (memory_id, seq)
    ) WITHOUT ROWID;
    CREATE TRIGGER stm_versions_on_delete AFTER DELETE ON short_term_memories BEGIN
        DELETE FROM stm_note_versions WHERE memory_id = old.id;
    END;
    CREATE TRIGGER stm_versions_on_clear AFTER UPDATE OF summary, categories, key_slot
    ON short_term_memories
    WHEN new.key_slot IS NOT old.key_slot OR (new.summary IS NULL AND new.categories = '{}')
    BEGIN
        DELETE FROM stm_note_versions WHERE memory_id = new.id;
    END;
    DROP INDEX stm_changes_deletes;
    CREATE INDEX stm_changes_deletes ON stm_changes (position)
        WHERE kind IN ('clear_channel', 'purge_user', 'delete_messages', 'edit_messages',
            'restore');
    """
_NOTE_HISTORY_POSTGRES = """
    CREATE TABLE stm_note_versions (
        memory_id BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        key_slot BIGINT NOT NULL,
        chain_id BIGINT,
        chain_version BIGINT,
        summary TEXT,
        categories TEXT NOT NULL DEFAULT '{}',
        written_at DOUBLE PRECISION NOT NULL,
        written_by BIGINT,
        restored_from BIGINT,
        PRIMARY KEY (memory_id, seq)
    );
    CREATE FUNCTION stm_versions_on_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            DELETE FROM stm_note_versions WHERE memory_id = OLD.id;
            RETURN OLD;
        END IF;
        IF NEW.key_slot IS DISTINCT FROM OLD.key_slot
                OR (NEW.summary IS NULL AND NEW.categories = '{}') THEN
            DELETE FROM stm_note_versions WHERE memory_id = OLD.id;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER stm_versions_on_delete AFTER DELETE ON short_term_memories
        FOR EACH ROW EXECUTE FUNCTION stm_versions_on_change();
    CREATE TRIGGER stm_versions_on_clear AFTER UPDATE OF summary, categories, key_slot
        ON short_term_memories FOR EACH ROW EXECUTE FUNCTION stm_versions_on_change();
    DROP INDEX stm_changes_deletes;
    CREATE INDEX stm_changes_deletes ON stm_changes (position)
        WHERE kind IN ('clear_channel', 'purge_user', 'delete_messages', 'edit_messages',
            'restore');
    """

# A server forgotten (``ForgetServer``) is a delete guards and write-behind batches read
# too (``forget_server``, naming the server): the feed's index of deletes takes it. The
# list is GUARD_KINDS_SQL's as it stands since.
_FEED_FORGETS = """
    DROP INDEX stm_changes_deletes;
    CREATE INDEX stm_changes_deletes ON stm_changes (position)
        WHERE kind IN ('clear_channel', 'purge_user', 'delete_messages', 'edit_messages',
            'restore', 'forget_server');
    """

# -- SQLite (its second migration, crypto-shredding's, is in _shred.py) --------------------
SQLITE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE short_term_memories (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL CHECK (scope IN ('server', 'user')),
        server_id INTEGER,
        user_id INTEGER,
        channel_id INTEGER NOT NULL,
        persona_id INTEGER,
        parent_channel_id INTEGER,
        channel_name TEXT,
        server_name TEXT,
        channel_private INTEGER NOT NULL DEFAULT 0,
        categories TEXT NOT NULL DEFAULT '{}',
        summary TEXT,
        turns_since_refresh INTEGER NOT NULL DEFAULT 0,
        last_refreshed_turn INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    CREATE INDEX stm_by_channel ON short_term_memories (channel_id);
    CREATE INDEX stm_by_user ON short_term_memories (user_id, server_id);
    CREATE INDEX stm_by_group
        ON short_term_memories (scope, server_id, user_id, persona_id, updated_at);
    CREATE INDEX stm_by_updated ON short_term_memories (updated_at);
    CREATE TABLE short_term_memory_contributors (
        user_id INTEGER NOT NULL,
        memory_id INTEGER NOT NULL REFERENCES short_term_memories (id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, memory_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_contributors_by_memory ON short_term_memory_contributors (memory_id);
    CREATE TABLE stm_server_settings (
        server_id INTEGER PRIMARY KEY,
        settings TEXT NOT NULL
    );
    CREATE TABLE stm_user_opt_outs (
        user_id INTEGER PRIMARY KEY,
        since REAL NOT NULL
    );
    """,
    shred.MIGRATION,
    # The change feed other processes follow, and a version per row that it names.
    """
    ALTER TABLE short_term_memories ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE stm_changes (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        key TEXT,
        version INTEGER,
        channel_id INTEGER,
        user_id INTEGER,
        server_id INTEGER,
        origin TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE TABLE stm_feed (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pruned_through INTEGER NOT NULL
    );
    INSERT INTO stm_feed (id, pruned_through) VALUES (1, 0);
    """,
    # Provenance as chains of versions (see _lineage.py and store/_chains.py) instead of a
    # set of contributors per row. Each row that holds distilled content becomes the
    # first version of a chain of its own whose members are its contributors: a purge
    # clears what it cleared before.
    f"""
    CREATE TABLE stm_chains (
        id INTEGER PRIMARY KEY,
        live_key TEXT NOT NULL,
        server_id INTEGER,
        head INTEGER NOT NULL,
        ended INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_chains_ended ON stm_chains (id) WHERE ended = 1;
    CREATE TABLE stm_chain_members (
        member INTEGER NOT NULL,
        chain_id INTEGER NOT NULL,
        first INTEGER NOT NULL,
        PRIMARY KEY (member, chain_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_members_by_chain ON stm_chain_members (chain_id);
    CREATE TABLE stm_chain_edges (
        parent INTEGER NOT NULL,
        child INTEGER NOT NULL,
        own INTEGER NOT NULL,
        parent_version INTEGER NOT NULL,
        child_version INTEGER NOT NULL,
        PRIMARY KEY (parent, child, own, parent_version)
    ) WITHOUT ROWID;
    CREATE INDEX stm_edges_by_child ON stm_chain_edges (child);
    CREATE TABLE stm_purge_ranges (
        position INTEGER NOT NULL,
        chain_id INTEGER NOT NULL,
        from_version INTEGER NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (position, chain_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_ranges_pending ON stm_purge_ranges (chain_id) WHERE done = 0;
    ALTER TABLE short_term_memories ADD COLUMN chain_id INTEGER;
    ALTER TABLE short_term_memories ADD COLUMN chain_version INTEGER;
    CREATE INDEX stm_by_chain ON short_term_memories (chain_id, chain_version);
    INSERT INTO stm_chains (id, live_key, server_id, head)
        SELECT id, key, server_id, 1 FROM short_term_memories WHERE {DISTILLED_SQL};
    UPDATE short_term_memories SET chain_id = id, chain_version = 1 WHERE {DISTILLED_SQL};
    INSERT INTO stm_chain_members (member, chain_id, first)
        SELECT c.user_id, c.memory_id, 1 FROM short_term_memory_contributors c
        JOIN short_term_memories m ON m.id = c.memory_id WHERE m.chain_id IS NOT NULL;
    DROP TABLE short_term_memory_contributors;
    """,
    # Purges plan their ranges in the store, round after round of edges followed.
    """
    ALTER TABLE stm_purge_ranges ADD COLUMN expanded INTEGER NOT NULL DEFAULT 1;
    """,  # A purge is planned in steps, each its own transaction: its plan's state.
    """
    CREATE TABLE stm_purges (
        position INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL,
        server_id INTEGER,
        erasure TEXT NOT NULL,
        planned INTEGER NOT NULL,
        cursor INTEGER NOT NULL
    );
    CREATE INDEX stm_purges_unplanned ON stm_purges (position) WHERE planned = 0;
    """,  # Servers that removed the bot, cleared once their grace period is over.
    """
    CREATE TABLE stm_departures (
        server_id INTEGER PRIMARY KEY,
        left_at REAL NOT NULL
    );
    """,
    _PURGE_STEPS,
    _MEMBER_SERVERS,
    _PURGE_COUNTS,
    # A virtual column: computed when read or indexed, stored only in the indexes.
    f"""
    ALTER TABLE short_term_memories ADD COLUMN updated_slot INTEGER
        GENERATED ALWAYS AS (CAST(updated_at / {SLOT_SECONDS} AS INTEGER)) VIRTUAL;
    """
    + _TIME_SLOTS.format(by_updated="updated_slot"),
    _JANITOR_BY_ID,
    _FEED_DELETES,
    _PURGE_CLEARED,
    _NOTE_HISTORY_SQLITE,
    _FEED_FORGETS,
)


# -- PostgreSQL ----------------------------------------------------------------------------
POSTGRES_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE short_term_memories (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL CHECK (scope IN ('server', 'user')),
        server_id BIGINT,
        user_id BIGINT,
        channel_id BIGINT NOT NULL,
        persona_id BIGINT,
        parent_channel_id BIGINT,
        channel_name TEXT,
        server_name TEXT,
        channel_private BOOLEAN NOT NULL DEFAULT FALSE,
        categories TEXT NOT NULL DEFAULT '{}',
        summary TEXT,
        turns_since_refresh INTEGER NOT NULL DEFAULT 0,
        last_refreshed_turn INTEGER NOT NULL DEFAULT 0,
        updated_at DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_by_channel ON short_term_memories (channel_id);
    CREATE INDEX stm_by_user ON short_term_memories (user_id, server_id);
    CREATE INDEX stm_by_group
        ON short_term_memories (scope, server_id, user_id, persona_id, updated_at);
    CREATE INDEX stm_by_updated ON short_term_memories (updated_at);
    CREATE TABLE short_term_memory_contributors (
        user_id BIGINT NOT NULL,
        memory_id BIGINT NOT NULL REFERENCES short_term_memories (id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, memory_id)
    );
    CREATE INDEX stm_contributors_by_memory ON short_term_memory_contributors (memory_id);
    CREATE TABLE stm_server_settings (
        server_id BIGINT PRIMARY KEY,
        settings TEXT NOT NULL
    );
    CREATE TABLE stm_user_opt_outs (
        user_id BIGINT PRIMARY KEY,
        since DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE stm_changes (
        position BIGINT PRIMARY KEY,
        kind TEXT NOT NULL,
        key TEXT,
        version BIGINT,
        channel_id BIGINT,
        user_id BIGINT,
        server_id BIGINT,
        origin TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE stm_feed (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        position BIGINT NOT NULL,
        pruned_through BIGINT NOT NULL
    );
    INSERT INTO stm_feed (id, position, pruned_through) VALUES (1, 0, 0);
    """,
    # Provenance as chains of versions (see _lineage.py and store/_chains.py), as on SQLite:
    # each row with distilled content becomes the first version of a chain of its own
    # whose members are its contributors.
    f"""
    CREATE TABLE stm_chains (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        live_key TEXT NOT NULL,
        server_id BIGINT,
        head BIGINT NOT NULL,
        ended INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_chains_ended ON stm_chains (id) WHERE ended = 1;
    CREATE TABLE stm_chain_members (
        member BIGINT NOT NULL,
        chain_id BIGINT NOT NULL,
        first BIGINT NOT NULL,
        PRIMARY KEY (member, chain_id)
    );
    CREATE INDEX stm_members_by_chain ON stm_chain_members (chain_id);
    CREATE TABLE stm_chain_edges (
        parent BIGINT NOT NULL,
        child BIGINT NOT NULL,
        own INTEGER NOT NULL,
        parent_version BIGINT NOT NULL,
        child_version BIGINT NOT NULL,
        PRIMARY KEY (parent, child, own, parent_version)
    );
    CREATE INDEX stm_edges_by_child ON stm_chain_edges (child);
    CREATE TABLE stm_purge_ranges (
        position BIGINT NOT NULL,
        chain_id BIGINT NOT NULL,
        from_version BIGINT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (position, chain_id)
    );
    CREATE INDEX stm_ranges_pending ON stm_purge_ranges (chain_id) WHERE done = 0;
    ALTER TABLE short_term_memories ADD COLUMN chain_id BIGINT;
    ALTER TABLE short_term_memories ADD COLUMN chain_version BIGINT;
    CREATE INDEX stm_by_chain ON short_term_memories (chain_id, chain_version);
    INSERT INTO stm_chains (id, live_key, server_id, head)
        SELECT id, key, server_id, 1 FROM short_term_memories WHERE {DISTILLED_SQL};
    SELECT setval(pg_get_serial_sequence('stm_chains', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM stm_chains), false);
    UPDATE short_term_memories SET chain_id = id, chain_version = 1 WHERE {DISTILLED_SQL};
    INSERT INTO stm_chain_members (member, chain_id, first)
        SELECT c.user_id, c.memory_id, 1 FROM short_term_memory_contributors c
        JOIN short_term_memories m ON m.id = c.memory_id WHERE m.chain_id IS NOT NULL;
    DROP TABLE short_term_memory_contributors;
    """,
    # Crypto-shredding, as on SQLite (see _shred.py): distilled text is stored encrypted
    # under a key of its row's own, in stm_keys; deleting or clearing a row deletes its key
    # in the same transaction. Rows stored in the clear by an earlier version are sealed by
    # migrate() right after this script.
    """
    CREATE TABLE stm_keys (
        slot BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        key BYTEA NOT NULL CHECK (length(key) = 32)
    );
    ALTER TABLE short_term_memories ADD COLUMN key_slot BIGINT;
    CREATE FUNCTION stm_shred_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.key_slot IS NOT NULL THEN
            DELETE FROM stm_keys WHERE slot = OLD.key_slot;
        END IF;
        RETURN OLD;
    END $$;
    CREATE TRIGGER stm_shred_on_delete AFTER DELETE ON short_term_memories
        FOR EACH ROW EXECUTE FUNCTION stm_shred_on_delete();
    CREATE FUNCTION stm_shred_on_clear() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.key_slot IS NOT NULL AND (NEW.key_slot IS DISTINCT FROM OLD.key_slot
                OR (NEW.summary IS NULL AND NEW.categories = '{}')) THEN
            DELETE FROM stm_keys WHERE slot = OLD.key_slot;
            IF NEW.key_slot IS NOT DISTINCT FROM OLD.key_slot THEN
                NEW.key_slot := NULL;
            END IF;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER stm_shred_on_clear BEFORE UPDATE OF summary, categories, key_slot
        ON short_term_memories FOR EACH ROW EXECUTE FUNCTION stm_shred_on_clear();
    """,
    # Purges plan their ranges in the store, round after round of edges followed.
    """
    ALTER TABLE stm_purge_ranges ADD COLUMN expanded INTEGER NOT NULL DEFAULT 1;
    """,  # A purge is planned in steps, each its own transaction: its plan's state.
    """
    CREATE TABLE stm_purges (
        position BIGINT PRIMARY KEY,
        user_id BIGINT NOT NULL,
        server_id BIGINT,
        erasure TEXT NOT NULL,
        planned INTEGER NOT NULL,
        cursor BIGINT NOT NULL
    );
    CREATE INDEX stm_purges_unplanned ON stm_purges (position) WHERE planned = 0;
    """,
    # Servers that removed the bot, cleared once their grace period is over.
    """
    CREATE TABLE stm_departures (
        server_id BIGINT PRIMARY KEY,
        left_at DOUBLE PRECISION NOT NULL
    );
    """,
    _PURGE_STEPS,
    _MEMBER_SERVERS,
    _PURGE_COUNTS,
    f"""
    ALTER TABLE short_term_memories ADD COLUMN updated_slot BIGINT
        GENERATED ALWAYS AS (floor(updated_at / {SLOT_SECONDS})::bigint) STORED;
    """
    + _TIME_SLOTS.format(by_updated="updated_slot, id"),
    _JANITOR_BY_ID,
    _FEED_DELETES,
    _PURGE_CLEARED,
    _NOTE_HISTORY_POSTGRES,
    _FEED_FORGETS,
)
# The migration after which rows an earlier version stored in the clear are sealed.
POSTGRES_SEALING = 2


def statements(script: str) -> list[str]:
    """The complete statements of ``script`` (a trigger's body holds semicolons, so
    splitting on them does not work)."""
    found, statement = [], ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            if statement.strip(" \n\t;"):
                found.append(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"incomplete statement in a migration: {statement!r}")
    return found


def newer(name: str, version: int, code_version: int, kind: str) -> SchemaVersionError:
    """The error of a database (a ``kind``, file or database, called ``name``) that a newer
    version of the library wrote."""
    return SchemaVersionError(
        f"{name} has schema version {version}, newer than this version of the library "
        f"understands ({code_version}); upgrade the library or use another {kind}"
    )


def check_version(
    name: str,
    version: int,
    code_version: int,
    *,
    kind: str,
    made: bool,
    other_tables: bool,
    require_current: bool,
    absent: StoreError | None = None,
) -> None:
    """Raise why an existing database called ``name`` cannot serve this library, if it
    cannot: a newer schema; no schema (``made`` False) but other tables, or ``absent``
    when given; with ``require_current``, an older schema."""
    if version > code_version:
        raise newer(name, version, code_version, kind)
    if not made:
        if other_tables:
            raise StoreError(f"{name} is not a short-term memory database (it holds other tables)")
        if absent is not None:
            raise absent
    if require_current and version < code_version:
        raise StoreError(
            f"{name} has schema version {version}, older than this library's "
            f"({code_version}); run 'python -m stm migrate' first"
        )
