"""What every store does, written once and run against SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from helpers import StoreOpener, stored_row

from stm._keys import server_key, user_key
from stm._lineage import Lineage, Pin, Range
from stm.store._base import (
    DeleteChannel,
    DeleteExpired,
    Expired,
    ForgetServer,
    Guard,
    LoadRecent,
    LoadRows,
    Overtaken,
    PreviewPurge,
    PurgeResult,
    PurgeTotals,
    PurgeUser,
    Saved,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    StoredRow,
    SweepPurge,
    SweepStep,
    Touch,
)
from stm.store._sqlite import SQLiteStore

BOTH_STORES = True
NOW = time.time()
HOUR = 3600.0
FAR = NOW - 1e6  # thresholds that expire nothing


def row(
    key: str,
    *,
    summary: str | None = "remembered",
    updated_at: float = NOW,
    **fields: Any,
) -> StoredRow:
    """A row whose identity is read off its key."""
    parts = key.split(":")
    scope = parts[1]
    owner, channel = int(parts[2]), int(parts[3])
    persona = int(parts[4]) if len(parts) > 4 else None
    server = fields.pop("server_id", owner if scope == "server" else None)
    user = owner if scope == "user" else None
    base = stored_row(key, server, user, channel, summary=summary, updated_at=updated_at)
    named = {"persona_id": persona, "channel_name": "general", "server_name": "harbor"}
    return replace(base, **(named | fields))


def saves(
    *rows: StoredRow,
    shown: tuple[int, ...] = (),
    other: tuple[Pin | str, ...] = (),
    own: tuple[Pin | str, ...] = (),
    guard: Guard | None = None,
) -> list[SaveDistilled]:
    """One upgrade of ``rows`` (one version), written from a prompt that showed the words of
    ``shown`` directly and the notes ``other`` (and kept ``own``)."""
    lineage = Lineage(frozenset(shown), own, other)
    return [SaveDistilled(r, guard, lineage) for r in rows]


async def load(store: Any, *keys: str) -> dict[str, StoredRow]:
    (rows,) = await store.run([LoadRows(keys, FAR, FAR)])
    return {r.key: r for r in rows}


async def kinds(store: Any, after: int = 0) -> list[tuple[Any, ...]]:
    page = await store.read_changes(after)
    return [(c.kind, c.key, c.channel_id, c.user_id, c.server_id) for c in page.changes]


# -- rows ---------------------------------------------------------------------------------
async def test_a_saved_row_reads_back_whole(store: Any) -> None:
    """Every field, the categories and the contributors survive the round trip."""
    saved = row(
        user_key(7, 10, 3),
        server_id=100,
        categories={"plans": "a picnic", "mood": "sunny ☀"},
        summary=None,
        parent_channel_id=9,
        channel_private=True,
        turns_since_refresh=4,
        last_refreshed_turn=2,
    )
    (result,) = await store.run(saves(saved, shown=(7, 8)))
    assert isinstance(result, Saved) and result.pin == Pin(1, 1)
    got = (await load(store, saved.key))[saved.key]
    assert got == replace(saved, version=1, pin=Pin(1, 1))
    assert await store.members(Pin(1, 1)) == [7, 8]


async def test_each_upgrade_is_the_next_version_of_its_chain(store: Any) -> None:
    """The version counts writes of a row; an upgrade of the live row extends its chain,
    and a member is kept from the first version whose prompt showed them."""
    key = server_key(100, 10)
    await store.run(saves(row(key), shown=(1, 2)))
    await store.run(saves(row(key, summary="newer"), shown=(3, 2)))
    got = (await load(store, key))[key]
    assert (got.summary, got.pin, got.version) == ("newer", Pin(1, 2), 2)
    assert await store.members(Pin(1, 1)) == [1, 2]
    assert await store.members(Pin(1, 2)) == [1, 2, 3]


async def test_the_rows_of_one_upgrade_pin_one_version(store: Any) -> None:
    """The user's and the server's row of one upgrade are one version (the server row's
    chain); a DM's user row is a chain of its own; saves without a lineage are each one."""
    mine, shared, dm = user_key(7, 10), server_key(100, 10), user_key(7, 30)
    results = await store.run(
        [*saves(row(mine, server_id=100), row(shared), shown=(7,)), *saves(row(dm), shown=(7,))]
    )
    assert [r.pin for r in results] == [Pin(1, 1), Pin(1, 1), Pin(2, 1)]
    results = await store.run([SaveDistilled(row(shared)), SaveDistilled(row(shared))])
    assert [r.pin for r in results] == [Pin(1, 2), Pin(1, 3)]
    got = await load(store, mine, shared, dm)
    assert (got[mine].pin, got[shared].pin, got[dm].pin) == (Pin(1, 1), Pin(1, 3), Pin(2, 1))


async def test_notes_without_content_pin_no_version(store: Any) -> None:
    key = server_key(100, 10)
    await store.run(saves(row(key), shown=(1,)))
    await store.run(saves(row(key, summary=None), shown=(1,)))
    assert (await load(store, key))[key].pin is None


async def test_a_failed_batch_records_no_version(store: Any) -> None:
    """Nothing of a failed batch is kept: its versions, members and edges included."""
    key = server_key(100, 10)
    bad = replace(row(server_key(1, 2)), scope="nonsense")  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - each driver raises its own error
        await store.run([*saves(row(key), shown=(5,)), Touch((bad,))])
    assert await store.members(Pin(1, 1)) == []
    (result,) = await store.run(saves(row(key), shown=(6,)))
    assert result.pin.version == 1
    assert await store.members(result.pin) == [6]


async def test_touch_writes_identity_and_counters_never_distilled_content(store: Any) -> None:
    """Touch keeps the summary; an unhydrated row only gets identity and activity; names
    are kept when the touch has none; activity never goes back in time."""
    key = server_key(100, 10)
    await store.run([SaveDistilled(row(key, summary="kept"))])
    touched = row(key, summary=None, turns_since_refresh=9, updated_at=NOW + 5, channel_name=None)
    await store.run([Touch((touched,))])
    got = (await load(store, key))[key]
    assert (got.summary, got.turns_since_refresh, got.channel_name) == ("kept", 9, "general")
    assert got.updated_at == NOW + 5
    unknown = replace(touched, turns_since_refresh=0, updated_at=NOW, counters_known=False)
    await store.run([Touch((unknown,))])
    got = (await load(store, key))[key]
    assert (got.turns_since_refresh, got.updated_at) == (9, NOW + 5)
    fresh = row(server_key(100, 11), summary=None, counters_known=False)
    await store.run([Touch((fresh,))])
    assert (await load(store, fresh.key))[fresh.key].summary is None


async def test_clearing_a_channel_deletes_every_scope_and_persona(store: Any) -> None:
    keys = [server_key(100, 10), server_key(100, 10, 3), user_key(1, 10), user_key(2, 11)]
    await store.run([SaveDistilled(row(k)) for k in keys])
    (count,) = await store.run([DeleteChannel(10)])
    assert count == 3
    assert set(await load(store, *keys)) == {user_key(2, 11)}


@pytest.mark.parametrize("server", [None, 100])
async def test_a_purge_deletes_own_rows_and_drops_what_the_user_contributed_to(
    store: Any, server: int | None
) -> None:
    """Everywhere, or within one server: own rows go, distilled content the user
    contributed to is dropped (the row and its identity stay), the rest is untouched."""
    own_here = row(user_key(7, 10), server_id=100)
    own_elsewhere = row(user_key(7, 20), server_id=200)
    own_dm = row(user_key(7, 30), server_id=None)
    shared_here = row(server_key(100, 10))
    shared_elsewhere = row(server_key(200, 20))
    untouched = row(server_key(100, 11))
    rows = [own_here, own_elsewhere, own_dm, shared_here, shared_elsewhere, untouched]
    await store.run(
        [
            *saves(own_here, shown=(7,)),
            *saves(own_elsewhere, shown=(7,)),
            *saves(own_dm, shown=(7,)),
            *saves(shared_here, shown=(7, 8)),
            *saves(shared_elsewhere, shown=(7,)),
            *saves(untouched, shown=(8,)),
        ]
    )
    (result,) = await store.run([PurgeUser(7, server)])
    assert isinstance(result, PurgeResult) and not result.more
    left = await load(store, *(r.key for r in rows))
    if server is None:
        assert set(left) == {shared_here.key, shared_elsewhere.key, untouched.key}
        assert left[shared_elsewhere.key].summary is None
        assert result.removed == 3
    else:
        assert set(left) == {own_elsewhere.key, own_dm.key, shared_here.key,
                             shared_elsewhere.key, untouched.key}  # fmt: skip
        assert left[shared_elsewhere.key].summary == "remembered"
        assert left[shared_elsewhere.key].pin is not None
        assert result.removed == 1
    assert (left[shared_here.key].summary, left[shared_here.key].categories) == (None, {})
    assert left[shared_here.key].pin is None
    assert left[untouched.key].summary == "remembered"


async def test_expiry_uses_the_summary_ttl_for_distilled_rows_and_is_inclusive(
    store: Any,
) -> None:
    """Rows without distilled content expire at the crude threshold, the others at the
    summary threshold; a row exactly at its threshold is expired."""
    crude_before, summary_before = NOW - 12 * HOUR, NOW - 24 * HOUR
    rows = {
        "crude at ttl": row(server_key(1, 1), summary=None, updated_at=crude_before),
        "crude young": row(server_key(1, 2), summary=None, updated_at=crude_before + 1),
        "summary past crude ttl": row(server_key(1, 3), updated_at=crude_before - 1),
        "summary at ttl": row(server_key(1, 4), updated_at=summary_before),
        "categories past crude": row(
            server_key(1, 5), summary=None, categories={"a": "b"}, updated_at=crude_before - 1
        ),
    }
    await store.run([SaveDistilled(r) for r in rows.values()])
    (done,) = await store.run([DeleteExpired(crude_before, summary_before)])
    assert done == Expired(2)  # and nothing left: no next chunk
    left = await load(store, *(r.key for r in rows.values()))
    assert set(left) == {rows[n].key for n in ("crude young", "summary past crude ttl",
                                               "categories past crude")}  # fmt: skip


async def test_reading_expired_rows_deletes_them(store: Any) -> None:
    old = row(server_key(1, 1), summary=None, updated_at=NOW - 13 * HOUR)
    await store.run([SaveDistilled(old)])
    (rows,) = await store.run([LoadRows((old.key,), NOW - 12 * HOUR, NOW - 24 * HOUR)])
    assert rows == []
    assert await load(store, old.key) == {}


async def test_recall_groups_read_newest_public_rows_of_one_owner_and_persona(
    store: Any,
) -> None:
    rows = [
        row(server_key(100, 1), updated_at=NOW - 3),
        row(server_key(100, 2), updated_at=NOW - 1),
        row(server_key(100, 3), updated_at=NOW - 2),
        row(server_key(100, 4), channel_private=True),
        row(server_key(100, 5, 9)),
        row(server_key(200, 6)),
        row(server_key(100, 7), summary=None, updated_at=NOW - 20 * HOUR),  # expired
        row(user_key(7, 8), server_id=100),
        row(user_key(7, 9), server_id=None),
        row(user_key(7, 10, 9), server_id=None),
    ]
    await store.run([SaveDistilled(r) for r in rows])
    crude, summary = NOW - 12 * HOUR, NOW - 24 * HOUR

    async def recall(
        scope: Any, owner: int, server: int | None, persona: int | None, limit: int = 10
    ) -> list[str]:
        (got,) = await store.run([LoadRecent(scope, owner, server, persona, limit, crude, summary)])
        return [r.key for r in got]

    assert await recall("server", 100, None, None) == [
        server_key(100, 2), server_key(100, 3), server_key(100, 1)
    ]  # fmt: skip
    assert await recall("server", 100, None, None, limit=1) == [server_key(100, 2)]
    assert await recall("server", 100, None, 9) == [server_key(100, 5, 9)]
    assert await recall("user", 7, 100, None) == [user_key(7, 8)]
    assert await recall("user", 7, None, None) == [user_key(7, 9)]
    assert await recall("user", 7, None, 9) == [user_key(7, 10, 9)]


async def test_settings_and_opt_outs_round_trip(store: Any) -> None:
    await store.run(
        [
            SaveServerSettings(1, '{"a": 1}'),
            SaveServerSettings(1, '{"a": 2}'),
            SaveServerSettings(2**63 - 1, "{}"),
            SaveOptOut(7, True, NOW),
            SaveOptOut(7, True, NOW + 1),
            SaveOptOut(8, True, NOW),
            SaveOptOut(8, False, NOW),
        ]
    )
    assert await store.load_server_settings() == {1: '{"a": 2}', 2**63 - 1: "{}"}
    assert await store.load_opt_outs() == {7}


async def test_a_failing_batch_leaves_nothing_behind(store: Any) -> None:
    """All of a batch or none of it, its feed entries included."""
    position = await store.current_position()
    bad = replace(row(server_key(1, 2)), scope="nonsense")  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - each driver raises its own error
        await store.run(
            [SaveDistilled(row(server_key(1, 1))), DeleteChannel(5), SaveDistilled(bad)]
        )
    assert await load(store, server_key(1, 1)) == {}
    assert await store.current_position() == position
    assert (await store.read_changes(position)).changes == ()


# -- the change feed ------------------------------------------------------------------------
async def test_every_change_another_process_must_honour_is_in_the_feed_in_order(
    store: Any,
) -> None:
    """Upgrades (key and version), clears, purges with and without a server, settings,
    opt-outs and expiry deletions, in the order of the batch; Touch and reads add nothing."""
    expiring = row(server_key(1, 1), summary=None, updated_at=NOW - 13 * HOUR)
    await store.run([Touch((expiring,))])
    assert await store.current_position() == 0
    await store.run(
        [
            SaveDistilled(row(server_key(1, 2))),
            SaveDistilled(row(server_key(1, 2))),
            DeleteChannel(3),
            PurgeUser(7, None),
            PurgeUser(8, 100),
            SaveServerSettings(100, "{}"),
            SaveOptOut(9, True, NOW),
            DeleteExpired(NOW - 12 * HOUR, NOW - 24 * HOUR),
            LoadRecent("server", 1, None, None, 5, FAR, FAR),
        ]
    )
    page = await store.read_changes(0)
    assert [c.position for c in page.changes] == list(range(1, 9))
    assert [(c.kind, c.key, c.version, c.channel_id, c.user_id, c.server_id)
            for c in page.changes] == [
        ("upgrade", server_key(1, 2), 1, None, None, None),
        ("upgrade", server_key(1, 2), 2, None, None, None),
        ("clear_channel", None, None, 3, None, None),
        ("purge_user", None, None, None, 7, None),
        ("purge_user", None, None, None, 8, 100),
        ("settings", None, None, None, None, 100),
        ("opt_out", None, None, None, 9, None),
        ("expire", server_key(1, 1), None, None, None, None),
    ]  # fmt: skip
    assert {c.origin for c in page.changes} == {store.origin}
    assert await store.current_position() == 8
    assert (page.next_after, page.fell_behind, page.more) == (8, False, False)


async def test_a_read_that_expires_rows_records_them(store: Any) -> None:
    old = row(server_key(1, 1), summary=None, updated_at=NOW - 13 * HOUR)
    await store.run([Touch((old,))])
    await store.run([LoadRows((old.key,), NOW - 12 * HOUR, NOW - 24 * HOUR)])
    assert await kinds(store) == [("expire", old.key, None, None, None)]


async def test_the_feed_is_read_in_pages(store: Any) -> None:
    await store.run([DeleteChannel(c) for c in range(1, 6)])
    first = await store.read_changes(0, limit=2)
    assert ([c.channel_id for c in first.changes], first.next_after, first.more) == (
        [1, 2],
        2,
        True,
    )
    second = await store.read_changes(first.next_after, limit=10)
    assert [c.channel_id for c in second.changes] == [3, 4, 5]
    assert not second.more
    empty = await store.read_changes(second.next_after)
    assert (empty.changes, empty.next_after) == ((), 5)


async def test_pruning_tells_a_follower_that_fell_behind_and_never_reuses_positions(
    store: Any,
) -> None:
    await store.run([DeleteChannel(c) for c in range(1, 5)])
    assert await store.prune_changes(older_than=time.time() + 60, keep_last=1) == 3
    behind = await store.read_changes(2)
    assert (behind.fell_behind, behind.changes, behind.next_after) == (True, (), 4)
    current = await store.read_changes(3)
    assert not current.fell_behind
    assert [c.channel_id for c in current.changes] == [4]
    assert await store.prune_changes(older_than=time.time() + 60) == 1
    assert await store.current_position() == 4
    await store.run([DeleteChannel(9)])
    page = await store.read_changes(4)
    assert [(c.position, c.channel_id) for c in page.changes] == [(5, 9)]


async def test_pruning_keeps_every_change_after_keep_after(store: Any) -> None:
    """``keep_after`` bounds the prune whatever the changes' age."""
    await store.run([DeleteChannel(c) for c in range(1, 5)])
    assert await store.prune_changes(older_than=time.time() + 60, keep_after=2) == 2
    page = await store.read_changes(2)
    assert not page.fell_behind
    assert [c.channel_id for c in page.changes] == [3, 4]
    assert await store.prune_changes(older_than=time.time() + 60, keep_after=0) == 0
    assert await store.prune_changes(older_than=time.time() + 60, keep_after=4) == 2


async def test_pruning_keeps_recent_changes(store: Any) -> None:
    await store.run([DeleteChannel(1)])
    assert await store.prune_changes(older_than=time.time() - 3600) == 0
    assert len((await store.read_changes(0)).changes) == 1


async def test_changes_of_another_store_are_seen_with_their_origin(
    open_store_: StoreOpener,
) -> None:
    first, second = await open_store_(), await open_store_()
    assert first.origin != second.origin
    assert not await first.poll_changed()
    await second.run([DeleteChannel(4)])
    assert await first.poll_changed()
    assert not await first.poll_changed()
    (change,) = (await first.read_changes(0)).changes
    assert (change.kind, change.channel_id, change.origin) == ("clear_channel", 4, second.origin)


# -- guarded upgrades -----------------------------------------------------------------------
GUARDED = row(server_key(100, 10))


def guard(after: int) -> Guard:
    return Guard(after=after, channels=frozenset({10, 11}), users=frozenset({7, 8}), server_id=100)


@pytest.mark.parametrize(
    "delete",
    [DeleteChannel(10), DeleteChannel(11), PurgeUser(7, None), PurgeUser(8, 100)],
    ids=["own channel", "shown channel", "contributor everywhere", "contributor here"],
)
async def test_an_upgrade_overtaken_by_a_delete_is_refused(store: Any, delete: Any) -> None:
    """A delete committed after the turn's view, by any process, refuses its upgrade."""
    after = await store.current_position()
    await store.run([delete])
    (result,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert result == Overtaken(after + 1)
    assert await load(store, GUARDED.key) == {}
    assert [c.kind for c in (await store.read_changes(after)).changes] != ["upgrade"]
    assert await store.current_position() == after + 1


@pytest.mark.parametrize(
    "delete",
    [DeleteChannel(12), PurgeUser(9, None), PurgeUser(7, 200), ForgetServer(200)],
    ids=["other channel", "other user", "contributor in another server", "other server"],
)
async def test_an_upgrade_not_overtaken_is_saved(store: Any, delete: Any) -> None:
    after = await store.current_position()
    await store.run([delete])
    (result,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert isinstance(result, Saved)
    assert (await load(store, GUARDED.key))[GUARDED.key].summary == "remembered"


async def test_an_upgrade_that_showed_notes_a_purge_cleared_is_refused(store: Any) -> None:
    """Another process purged a user whose words are in notes the prompt showed (its pins):
    refused by the purge's ranges, though the user is not among the prompt's own; notes
    the purge left, or a purge in another server, refuse nothing."""
    general, _, games = await _three_channels(store)
    pins = {key: r.pin for key, r in (await load(store, general, games)).items()}
    after = await store.current_position()
    (purge,) = await store.run([PurgeUser(7, None, "direct")])
    assert purge.ranges  # planned in its first transaction
    showed_cleared = replace(guard(after), users=frozenset({9}), pins=frozenset({pins[general]}))
    (refused,) = await store.run([SaveDistilled(GUARDED, showed_cleared)])
    assert refused == Overtaken(purge.position)
    showed_kept = replace(showed_cleared, pins=frozenset({pins[games]}))
    (saved,) = await store.run([SaveDistilled(GUARDED, showed_kept)])
    assert isinstance(saved, Saved)


async def test_an_upgrade_in_the_scope_of_a_purge_still_planned_is_refused(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SEED_CHUNK", 1)
    general, random, games = await _three_channels(store)
    pins = {key: r.pin for key, r in (await load(store, general, random, games)).items()}
    await store.run(saves(row(server_key(100, 13)), shown=(7,)))
    after = await store.current_position()
    (purge,) = await store.run([PurgeUser(7, None, "direct")])
    assert purge.ranges is None  # still being planned
    showed = replace(guard(after), users=frozenset({9}), pins=frozenset({pins[games]}))
    (refused,) = await store.run([SaveDistilled(GUARDED, showed)])
    assert refused == Overtaken(purge.position)  # it may reach anything in its scope
    elsewhere = replace(showed, server_id=300)
    (saved,) = await store.run([SaveDistilled(row(server_key(300, 40)), elsewhere)])
    # It reaches only the servers of the chains 7 is a member of: not one it never spoke in.
    assert purge.servers == frozenset({100}) and isinstance(saved, Saved)


async def test_a_delete_before_the_view_does_not_refuse(store: Any) -> None:
    await store.run([DeleteChannel(10)])
    after = await store.current_position()
    (result,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert isinstance(result, Saved)


async def test_a_refused_upgrade_does_not_fail_its_batch(store: Any) -> None:
    after = await store.current_position()
    await store.run([DeleteChannel(10)])
    other = row(server_key(100, 12))
    results = await store.run([SaveDistilled(GUARDED, guard(after)), SaveDistilled(other)])
    assert isinstance(results[0], Overtaken) and isinstance(results[1], Saved)
    assert set(await load(store, GUARDED.key, other.key)) == {other.key}


async def test_an_upgrade_whose_view_was_pruned_is_refused(store: Any) -> None:
    await store.run([DeleteChannel(50), DeleteChannel(51)])
    await store.prune_changes(older_than=time.time() + 60)
    (result,) = await store.run([SaveDistilled(GUARDED, guard(1))])
    assert isinstance(result, Overtaken)


# -- purges through chains ------------------------------------------------------------------
async def _three_channels(store: Any) -> tuple[str, str, str]:
    """#10's notes showed 7's words; #11's were written from a prompt that showed #10's
    notes; #12's from one that showed 8's words only."""
    general, random, games = server_key(100, 10), server_key(100, 11), server_key(100, 12)
    (first,) = await store.run(saves(row(general), shown=(7,)))
    await store.run(saves(row(random), shown=(9,), other=(first.pin,)))
    await store.run(saves(row(games), shown=(8,)))
    return general, random, games


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_purge_follows_the_edges_its_policy_follows(store: Any, erasure: Any) -> None:
    """``complete`` clears notes written from notes that held the user's words; ``direct``
    only the notes that showed them directly."""
    general, random, games = await _three_channels(store)
    (result,) = await store.run([PurgeUser(7, 100, erasure)])
    left = await load(store, general, random, games)
    assert left[general].summary is None
    assert left[games].summary == "remembered"
    if erasure == "complete":
        assert left[random].summary is None
        assert {r.chain for r in result.ranges} == {1, 2}
    else:
        assert left[random].summary == "remembered"
        assert {r.chain for r in result.ranges} == {1}
    assert await store.purge_ranges(result.position) == result.ranges


async def test_a_purge_clears_only_versions_from_the_first_that_showed_the_user(
    store: Any,
) -> None:
    """A user's own row written before another user's words arrived keeps its notes."""
    early, shared = user_key(1, 10), server_key(100, 10)
    await store.run(saves(row(early, server_id=100), row(shared), shown=(1,)))
    late = user_key(2, 10)
    await store.run(saves(row(late, server_id=100), row(shared), shown=(1, 7)))
    await store.run([PurgeUser(7, None, "direct")])
    left = await load(store, early, shared, late)
    assert left[early].summary == "remembered"
    assert left[shared].summary is None and left[late].summary is None


async def test_a_purge_of_many_rows_is_cleared_in_chunks_and_hidden_meanwhile(
    store: Any,
) -> None:
    """The first transaction clears a chunk; the rows left read as cleared, nothing may
    extend them, and each later chunk clears more until none is left."""
    from stm.store import _chains as chains

    shared = server_key(100, 10)
    rows = [row(user_key(u, 10), server_id=100) for u in range(100, 100 + chains.SWEEP_CHUNK + 30)]
    await store.run([s for r in rows for s in saves(r, row(shared), shown=(7, 1))])
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    assert result.more and result.cleared == chains.SWEEP_CHUNK
    got = await load(store, *(r.key for r in rows))
    assert all(r.summary is None and r.pin is None for r in got.values())
    assert await store.pending_sweeps() == [result.position]
    (refused,) = await store.run(saves(row(shared), shown=(1,)))
    assert refused == Overtaken(result.position)
    (swept,) = await store.run([SweepPurge(result.position)])
    assert swept == SweepStep(
        len(rows) + 1 - chains.SWEEP_CHUNK,
        False,
        phases=("clear", "finish"),
        totals=PurgeTotals(len(rows) + 1),  # the first transaction's rows and these
    )
    assert await store.pending_sweeps() == []
    (saved,) = await store.run(saves(row(shared), shown=(1,)))
    assert isinstance(saved, Saved) and saved.pin.chain != 1


async def test_a_smaller_step_of_a_purge_clears_a_smaller_chunk(store: Any) -> None:
    """A step asked for a share of its chunk clears that share, and the steps still add up
    to the whole purge."""
    from stm.store import _chains as chains

    rows = [row(user_key(u, 10), server_id=100) for u in range(100, 3 * chains.SWEEP_CHUNK)]
    await store.run([s for r in rows for s in saves(r, shown=(7, 1))])
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    cleared, steps = result.cleared, []
    while True:
        (step,) = await store.run([SweepPurge(result.position, 0.25)])
        steps.append(step[0])
        cleared += step[0]
        if not step[1]:
            break
    quarter = chains.scaled(chains.SWEEP_CHUNK, 0.25)
    assert quarter < chains.SWEEP_CHUNK
    assert max(steps) == quarter
    assert cleared == len(rows)
    got = await load(store, *(r.key for r in rows))
    assert all(r.summary is None for r in got.values())


async def test_each_kind_of_work_of_a_purge_step_takes_its_own_share(store: Any) -> None:
    """A step's clears take the share asked for clears and its finishing the share asked
    for finishing; a share given for another kind changes neither; each step says which
    kinds of work it did."""
    from stm.store import _chains as chains

    rows = [row(user_key(u, 10), server_id=100) for u in range(100, 3 * chains.SWEEP_CHUNK)]
    await store.run([s for r in rows for s in saves(r, shown=(7, 1))])
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    quarter = chains.scaled(chains.SWEEP_CHUNK, 0.25)
    sizes = (("page", 1.0), ("clear", 0.25), ("finish", 1.0))
    (step,) = await store.run([SweepPurge(result.position, 1.0, sizes)])
    kinds = list(step.phases)
    while "clear" not in step.phases:  # planned and told first
        assert step.cleared == 0 and step.more
        (step,) = await store.run([SweepPurge(result.position, 1.0, sizes)])
        kinds.extend(step.phases)
    assert kinds[0] in ("seed", "follow") and "page" in kinds
    assert (step.cleared, step.more, step.phases) == (quarter, True, ("clear",))
    # A share for another kind of work leaves clears at the full chunk.
    (step,) = await store.run([SweepPurge(result.position, 1.0, (("page", 0.25),))])
    assert quarter < step.cleared <= chains.SWEEP_CHUNK
    while step.more:
        (step,) = await store.run([SweepPurge(result.position, 1.0, (("clear", 0.25),))])
        assert step.cleared <= quarter and step.phases[0] in ("clear", "finish")
    assert step.phases[-1] == "finish"
    got = await load(store, *(r.key for r in rows))
    assert all(r.summary is None for r in got.values())


async def test_a_purge_whose_rows_are_cleared_but_chains_not_finished_is_resumed(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that stops after the rows are cleared and before every chain is finished
    leaves the purge among the pending sweeps."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "FINISH_CHUNK", 1)
    keys = [server_key(100, channel) for channel in range(10, 14)]
    for key in keys:
        await store.run(saves(row(key), shown=(7,)))
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    cleared = result.cleared
    step = None
    while cleared < len(keys):
        (step,) = await store.run([SweepPurge(result.position)])
        cleared += step[0]
    assert result.more or (step is not None and step[1])
    assert await store.pending_sweeps() == [result.position]
    while True:
        (step,) = await store.run([SweepPurge(result.position)])
        if not step[1]:
            break
    assert await store.pending_sweeps() == []


async def test_the_distilled_rows_of_many_servers_are_counted_a_few_servers_a_statement(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge's share is of each server's distilled rows: counted right when the servers
    it reaches take several statements, and the rows of other servers are not counted."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SERVERS_PER_COUNT", 2)
    for server in (100, 200, 300, 400, 500):
        for channel in range(server // 100):
            await store.run(saves(row(server_key(server, channel)), shown=(7,)))
    await store.run(saves(row(server_key(600, 1)), shown=(8,)))  # a server 7 is not in
    (preview,) = await store.run([PreviewPurge(7, None, "direct")])
    assert preview.distilled_by_server == {100: 1, 200: 2, 300: 3, 400: 4, 500: 5}
    (done,) = await store.run([PurgeUser(7, None, "direct")])
    assert done.reach is not None
    assert done.reach.distilled_by_server == preview.distilled_by_server


async def test_a_preview_counts_what_a_purge_would_clear(store: Any) -> None:
    await _three_channels(store)
    await store.run(saves(row(user_key(7, 10), server_id=100), shown=(7,)))
    (preview,) = await store.run([PreviewPurge(7, None, "complete")])
    assert (preview.own, preview.shared) == (1, 2)
    assert preview.shared_by_server == {100: 2}
    assert preview.distilled_by_server == {100: 4}
    (direct,) = await store.run([PreviewPurge(7, None, "direct")])
    assert direct.shared == 1
    left = await load(store, server_key(100, 10))
    assert left[server_key(100, 10)].summary == "remembered"  # a preview changes nothing


async def test_chains_nothing_needs_are_collected(store: Any) -> None:
    """Once no row pins a chain and no chain was written from it, the janitor drops it;
    a chain another was written from stays while that one lives."""
    await _three_channels(store)
    await store.run([DeleteChannel(11)])
    await store.run([DeleteExpired(FAR, FAR)])
    assert await store.members(Pin(2, 1)) == []  # #11's chain and its members are gone
    await store.run([DeleteChannel(10)])
    await store.run([DeleteExpired(FAR, FAR)])
    assert await store.members(Pin(1, 1)) == []
    assert await store.members(Pin(3, 1)) == [8]  # #12's is pinned


async def test_write_behind_does_not_bring_back_what_another_process_deleted(
    open_store_: StoreOpener,
) -> None:
    """A row taken before another process's purge of its user or clear of its channel is
    not written; the same rows after that process's position, or deleted by this store's
    own process, are."""
    store, other = await open_store_(), await open_store_()
    mine, cleared, kept = user_key(7, 10), server_key(100, 11), server_key(100, 12)
    after = await store.current_position()
    await other.run([PurgeUser(7, None), DeleteChannel(11)])
    rows = (row(mine, server_id=100), row(cleared, summary=None), row(kept, summary=None))
    await store.run([Touch(rows, after, FAR, FAR)])
    assert set(await load(store, mine, cleared, kept)) == {kept}
    await store.run([Touch(rows, await store.current_position(), FAR, FAR)])
    assert set(await load(store, mine, cleared, kept)) == {mine, cleared, kept}
    seen = await store.current_position()
    await store.run([PurgeUser(7, None)])  # this process's own: its cache already knows
    await store.run([Touch(rows, seen, FAR, FAR)])
    assert mine in await load(store, mine)


async def test_a_server_forgotten_elsewhere_refuses_its_upgrades_and_write_behind(
    open_store_: StoreOpener,
) -> None:
    """Another process forgot the server: an upgrade of its turn begun before, in a channel
    that had no row, is refused, and rows of its channels without rows taken before are not
    written behind; a DM's and another server's are."""
    store, other = await open_store_(), await open_store_()
    after = await store.current_position()
    await other.run([ForgetServer(100)])
    unwritten = row(server_key(100, 13))
    mine, elsewhere, dm = user_key(7, 13), server_key(200, 14), user_key(7, 15)
    (result,) = await store.run([SaveDistilled(unwritten, guard(after))])
    assert isinstance(result, Overtaken)
    rows = (row(mine, server_id=100), row(elsewhere, summary=None), row(dm, summary=None))
    await store.run([Touch(rows, after, FAR, FAR)])
    assert set(await load(store, unwritten.key, mine, elsewhere, dm)) == {elsewhere, dm}
    dm_guard = Guard(after=after, channels=frozenset({15}), users=frozenset({7}), server_id=None)
    (result,) = await store.run([SaveDistilled(row(dm), dm_guard)])
    assert isinstance(result, Saved)


async def test_write_behind_does_not_revive_an_expired_row(store: Any) -> None:
    """Activity on a key whose stored row expired starts a new row: the old notes are
    deleted, not refreshed."""
    key = server_key(100, 10)
    await store.run(saves(row(key, updated_at=NOW - 25 * HOUR), shown=(1,)))
    fresh = row(key, summary=None, updated_at=NOW, counters_known=False)
    await store.run([Touch((fresh,), None, NOW - 12 * HOUR, NOW - 24 * HOUR)])
    got = (await load(store, key))[key]
    assert (got.summary, got.pin, got.updated_at) == (None, None, NOW)
    assert ("expire", key, None, None, None) in await kinds(store)


async def test_ranges_name_what_was_cleared_for_other_processes(store: Any) -> None:
    await _three_channels(store)
    (result,) = await store.run([PurgeUser(7, None, "direct")])
    assert result.ranges == (Range(1, 1),)
    assert await store.purge_ranges(result.position) == (Range(1, 1),)
    assert await store.purge_ranges(result.position + 100) == ()


async def test_where_a_purge_everywhere_may_reach_includes_memberships_without_a_server(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a purge everywhere is planned it says which servers it may reach: those of
    every chain the user is a member of, found server by server, and chain by chain for
    memberships that do not say their server (DMs, and rows an earlier version added)."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SEED_CHUNK", 1)
    monkeypatch.setattr(chains, "FOLLOW_CHUNK", 1)
    for server in (100, 200, 300):
        for channel in (10, 11):
            await store.run(saves(row(server_key(server, channel)), shown=(7,)))
    await store.run(saves(row(user_key(8, 50)), shown=(7, 8)))  # a DM
    held = await store.execute(
        "SELECT m.server_id, c.server_id FROM stm_chain_members m "
        "JOIN stm_chains c ON c.id = m.chain_id"
    )
    assert len(held) == 8 and all(mine == chains_ for mine, chains_ in held)
    await store.execute(
        "UPDATE stm_chain_members SET server_id = NULL WHERE chain_id IN "
        "(SELECT id FROM stm_chains WHERE server_id = 300)"
    )
    (result,) = await store.run([PurgeUser(7, None, "direct")])
    assert result.ranges is None and result.more
    assert result.servers == frozenset({100, 200, 300, None})
    (elsewhere,) = await store.run([PurgeUser(8, None, "direct")])
    assert elsewhere.servers == frozenset({None})


async def test_a_purge_of_wide_reach_is_planned_over_several_transactions(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user in more chains than a step seeds: the purge is recorded at once and planned by
    later steps; until its plan is complete its ranges are unknown to other processes and
    every guarded upgrade in its scope is refused; then it clears them all."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SEED_CHUNK", 2)
    keys = [server_key(100, channel) for channel in range(10, 20)]
    for key in keys:
        await store.run(saves(row(key), shown=(7,)))
    after = await store.current_position()
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    assert result.ranges is None and result.more
    assert await store.purge_ranges(result.position) is None
    (refused,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert refused == Overtaken(result.position)
    steps = 0
    ranges = None
    while True:
        (step,) = await store.run([SweepPurge(result.position)])
        steps += 1
        if step.told:
            ranges = step.ranges
        if not step.more:
            break
    assert steps >= 2 and ranges is not None and len(ranges) == len(keys)
    assert await store.purge_ranges(result.position) == ranges
    assert all(r.summary is None for r in (await load(store, *keys)).values())
    (saved,) = await store.run([SaveDistilled(GUARDED, guard(await store.current_position()))])
    assert isinstance(saved, Saved)


async def test_the_ranges_of_a_wide_purge_are_told_a_page_at_a_time(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge planned at once but reaching more than a chunk tells nothing in its first
    transaction; later steps tell its ranges a page at a time, none longer than a page,
    the last one marked, and the pages are all of its ranges."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SWEEP_CHUNK", 2)
    monkeypatch.setattr(chains, "REACH_PAGE", 3)
    keys = [server_key(100, channel) for channel in range(10, 20)]
    for key in keys:
        await store.run(saves(row(key), shown=(7,)))
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    assert result.ranges is None and result.more and result.cleared == 0
    pages: list[tuple[Range, ...]] = []
    shared = 0
    while True:
        (step,) = await store.run([SweepPurge(result.position)])
        if step.ranges is not None:
            pages.append(step.ranges)
            assert step.reach is not None
            shared += step.reach.shared
        if step.told:
            break
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    told = tuple(r for p in pages for r in p)
    assert told == await store.purge_ranges(result.position)
    assert len(told) == len(keys) and shared == len(keys)


async def _wide_purge_in_a_larger_server(store: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """Ten rows of server 100 written from a prompt that showed user 7, thirty more that
    did not; distilled rows counted up to twice a purge's reach there, told three ranges
    a page. The position of user 7's purge there, planned."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SWEEP_CHUNK", 2)
    monkeypatch.setattr(chains, "REACH_PAGE", 3)
    monkeypatch.setattr(chains, "COUNT_BEYOND", 2)
    monkeypatch.setattr(chains, "COUNT_FLOOR", 0)
    for channel in range(10, 20):
        await store.run(saves(row(server_key(100, channel)), shown=(7,)))
    for channel in range(20, 50):
        await store.run(saves(row(server_key(100, channel)), shown=(8,)))
    (result,) = await store.run([PurgeUser(7, 100, "direct")])
    assert result.ranges is None and result.more
    return int(result.position)


@pytest.mark.parametrize(
    ("beyond", "told"),
    [
        (2, [(3, 6, True), (6, 12, True), (9, 18, True), (10, 20, True)]),
        (5, [(3, 15, True), (6, 30, True), (9, 40, False), (10, 40, False)]),
    ],
)
async def test_a_wide_purge_counts_a_server_on_from_where_its_last_page_stopped(
    store: Any, monkeypatch: pytest.MonkeyPatch, beyond: int, told: list[Any]
) -> None:
    """Each page of a wide purge says how many distilled rows the servers it reaches hold,
    counted on from where the purge's last page stopped, as far as ``beyond`` times what
    its pages have reached there so far: no page counts more than that many times its
    own reach, however large the server; once the count reaches the server's end, it is
    whole (40 rows: 10 reached, 30 not)."""
    from stm.store import _chains as chains

    position = await _wide_purge_in_a_larger_server(store, monkeypatch)
    monkeypatch.setattr(chains, "COUNT_BEYOND", beyond)
    seen: list[tuple[int, int, bool]] = []
    reached = 0
    while True:
        (step,) = await store.run([SweepPurge(position)])
        if step.ranges is not None:
            reach = step.reach
            reached += reach.shared
            held = reach.distilled_by_server[100]
            seen.append((reached, held, 100 in reach.distilled_at_least))
        if step.told:
            break
    assert seen == told


async def test_the_servers_a_page_reaches_first_are_counted_together(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page that reaches servers its purge has not counted yet counts them together
    (a statement per few hundred servers, not one or two each: on PostgreSQL each is a
    round trip, inside the step other work waits for), and says each one's count."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SWEEP_CHUNK", 2)
    servers = range(100, 105)
    for server in servers:
        for channel in (10, 11):
            await store.run(saves(row(server_key(server, channel)), shown=(7,)))
    (result,) = await store.run([PurgeUser(7, None, "direct")])
    assert result.more
    counting = chains._distilled_in
    calls: list[set[Any]] = []

    def counted(reached: Any, **options: Any) -> Any:
        calls.append(set(reached))
        return counting(reached, **options)

    monkeypatch.setattr(chains, "_distilled_in", counted)
    told = None
    while told is None:
        (step,) = await store.run([SweepPurge(result.position)])
        if step.ranges is not None:
            told = step.reach
    assert calls == [set(servers)]
    assert told.distilled_by_server == dict.fromkeys(servers, 2)
    assert not told.distilled_at_least


async def test_a_preview_counts_a_server_up_to_twice_its_reach_there(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preview counts a server's distilled rows up to the bound of what it reaches there:
    a lower bound when the server holds more; the exact number when it holds fewer."""
    from stm.store import _chains as chains

    await _wide_purge_in_a_larger_server(store, monkeypatch)
    (preview,) = await store.run([PreviewPurge(8, 100, "direct")])
    assert preview.shared_by_server == {100: 30}
    assert preview.distilled_by_server == {100: 40} and not preview.distilled_at_least
    monkeypatch.setattr(chains, "COUNT_BEYOND", 1)
    (preview,) = await store.run([PreviewPurge(8, 100, "direct")])
    assert preview.distilled_by_server == {100: 32} and preview.distilled_at_least == {100}


async def test_the_plans_of_finished_purges_go_with_the_feed(store: Any) -> None:
    """Once the feed no longer holds a finished purge, neither do its plan and ranges."""
    await _three_channels(store)
    (result,) = await store.run([PurgeUser(7, None, "complete")])
    assert await store.purge_ranges(result.position)
    await store.prune_changes(older_than=time.time() + 60)
    assert await store.purge_ranges(result.position) == ()
    assert await store.execute("SELECT count(*) FROM stm_purge_ranges") == [(0,)]
    assert await store.execute("SELECT count(*) FROM stm_purges") == [(0,)]


def test_counting_the_distilled_rows_of_any_number_of_servers_takes_few_statement_texts() -> None:
    """Every number of servers up to a statement's bound is counted with one of a few
    statement texts (PostgreSQL prepares each text once), each server once."""
    from stm.store import _chains as chains

    texts: set[str] = set()
    for count in range(1, chains.SERVERS_PER_COUNT + 1):
        servers = list(range(1000, 1000 + count))
        procedure = chains._distilled_in({**dict.fromkeys(servers, 1), None: 1})
        step = next(procedure)
        texts.add(step.sql)
        assert isinstance(step.params, dict)
        cap = step.params.pop("cap")
        assert cap == chains._bound(1)
        assert sorted(set(step.params.values())) == servers
        with pytest.raises(StopIteration) as done:
            procedure.send([(server, 1) for server in servers])
        assert done.value.value == (dict.fromkeys(servers, 1), frozenset())
    assert len(texts) <= 5


def test_a_server_is_counted_only_as_far_as_the_purge_reaches_there() -> None:
    """Each server is counted up to its own bound (servers reached alike share a
    statement), and a count that reaches its bound is a lower bound."""
    from stm.store import _chains as chains

    reached = {1: 1, 2: 1, 3: 300, None: 5}
    procedure = chains._distilled_in(reached)
    caps = []
    step = next(procedure)
    try:
        while True:
            assert isinstance(step.params, dict)
            cap = step.params["cap"]
            caps.append(cap)
            servers = {v for k, v in step.params.items() if k != "cap"}
            step = procedure.send([(server, cap if server == 2 else 7) for server in servers])
    except StopIteration as done:
        counts, at_least = done.value
    assert caps == [chains._bound(1), chains._bound(300)]
    assert chains._bound(300) >= chains.COUNT_BEYOND * 300 + chains.COUNT_FLOOR
    assert counts == {1: 7, 2: chains._bound(1), 3: 7} and at_least == {2}


async def test_a_read_waits_for_no_writer(store: Any) -> None:
    """A batch of reads alone runs as a read: it completes while another connection holds
    the write lock (SQLite's, PostgreSQL's feed row); a read that must delete expired rows
    still waits for it, and deletes them once it is free."""
    kept = row(server_key(1, 1))
    old = row(server_key(1, 2), summary=None, updated_at=NOW - 13 * HOUR)
    await store.run([SaveDistilled(kept), Touch((old,))])
    async with _write_lock(store):
        reads = [LoadRows((kept.key,), FAR, FAR), LoadRecent("server", 1, None, None, 5, FAR, FAR)]
        found, recent = await asyncio.wait_for(store.run(reads), 2.0)
        assert [r.key for r in found] == [kept.key] and len(recent) == 2
        expiring = asyncio.ensure_future(
            store.run([LoadRows((old.key,), NOW - 12 * HOUR, NOW - 24 * HOUR)])
        )
        await asyncio.sleep(0.2)
        assert not expiring.done()
    assert await asyncio.wait_for(expiring, 5.0) == [[]]
    assert await kinds(store) == [("upgrade", kept.key, None, None, None),
                                  ("expire", old.key, None, None, None)]  # fmt: skip


@contextlib.asynccontextmanager
async def _write_lock(store: Any) -> AsyncIterator[None]:
    """Hold the store's write lock from another connection."""
    if isinstance(store, SQLiteStore):
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    import asyncpg

    other = await asyncpg.connect(store._dsn)
    try:
        async with other.transaction():
            await other.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
            yield
    finally:
        await other.close()


async def _most_edges_of_a_pair(store: Any) -> int:
    sql = (
        "SELECT max(n) FROM (SELECT count(*) AS n FROM stm_chain_edges "
        "GROUP BY parent, child, own) AS pairs"
    )
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            return int(db.execute(sql).fetchone()[0])
    async with store._pool.acquire() as conn:
        return int(await conn.fetchval(sql))


async def test_a_run_of_upgrades_longer_than_a_statements_list_links_every_pair(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of upgrades with more keys and pairs than the store reads in one statement
    (here 30 values on SQLite; PostgreSQL binds each list as one array) extends every
    chain it upgrades again, and merges into every pair's edges (at most
    ``EDGES_PER_PAIR`` each); a purge of the one user shown to the first channel clears,
    by ``complete``, every channel whose notes were written from the first's."""
    from stm._lineage import EDGES_PER_PAIR
    from stm.store import _dialect as dialect

    monkeypatch.setattr(dialect, "BOUND_VALUES", 30)
    keys = [server_key(100, c) for c in range(60)]
    await store.run(
        [
            SaveDistilled(row(key), lineage=Lineage(frozenset({7 if c == 0 else 8})))
            for c, key in enumerate(keys)
        ]
    )
    runs = EDGES_PER_PAIR + 2  # each pair's edges merged past the limit
    for n in range(runs):
        # A lineage of each upgrade's own (saves sharing one are one upgrade).
        await store.run(
            [
                SaveDistilled(
                    row(key, summary=f"run {n}"),
                    lineage=Lineage(frozenset({8}), other=(keys[0],)),
                )
                for key in keys
            ]
        )
    got = await load(store, *keys)
    assert {g.pin.version for g in got.values() if g.pin is not None} == {runs + 1}
    assert len({g.pin.chain for g in got.values() if g.pin is not None}) == len(keys)
    assert await _most_edges_of_a_pair(store) == EDGES_PER_PAIR
    (result,) = await store.run([PurgeUser(7, 100, "complete")])
    more = result.more
    while more:
        (step,) = await store.run([SweepPurge(result.position)])
        more = step.more
    got = await load(store, *keys)
    assert [k for k in keys if got[k].summary is not None] == []
