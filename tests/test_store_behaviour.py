"""What every store does, written once and run against SQLite and PostgreSQL."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from conftest import StoreOpener

from stm.keys import server_key, user_key
from stm.store.base import (
    DeleteChannel,
    DeleteExpired,
    Guard,
    LoadRecent,
    LoadRows,
    Overtaken,
    PurgeUser,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    StoredRow,
    Touch,
)

BOTH_STORES = True
NOW = time.time()
HOUR = 3600.0
FAR = NOW - 1e6  # thresholds that expire nothing


def row(
    key: str,
    *,
    summary: str | None = "remembered",
    contributors: tuple[int, ...] = (),
    updated_at: float = NOW,
    **fields: Any,
) -> StoredRow:
    """A row whose identity is read off its key."""
    parts = key.split(":")
    scope = parts[1]
    owner, channel = int(parts[2]), int(parts[3])
    persona = int(parts[4]) if len(parts) > 4 else None
    base = StoredRow(
        key=key,
        scope="user" if scope == "user" else "server",
        server_id=fields.pop("server_id", owner if scope == "server" else None),
        user_id=owner if scope == "user" else None,
        channel_id=channel,
        persona_id=persona,
        parent_channel_id=None,
        channel_name="general",
        server_name="harbor",
        channel_private=False,
        summary=summary,
        categories={},
        contributors=frozenset(contributors),
        turns_since_refresh=1,
        last_refreshed_turn=1,
        updated_at=updated_at,
    )
    return replace(base, **fields)


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
        contributors=(7, 8),
        parent_channel_id=9,
        channel_private=True,
        turns_since_refresh=4,
        last_refreshed_turn=2,
    )
    await store.run([SaveDistilled(saved)])
    got = (await load(store, saved.key))[saved.key]
    assert got == replace(saved, version=1)


async def test_each_save_bumps_the_version_and_replaces_contributors(store: Any) -> None:
    """The version counts writes of the distilled content; contributors are replaced."""
    key = server_key(100, 10)
    await store.run([SaveDistilled(row(key, contributors=(1, 2)))])
    await store.run([SaveDistilled(row(key, summary="newer", contributors=(3,)))])
    got = (await load(store, key))[key]
    assert (got.summary, got.contributors, got.version) == ("newer", frozenset({3}), 2)


async def test_contributors_follow_each_rows_last_save_in_a_batch(store: Any) -> None:
    """In one batch, a row's contributors are those of its last save, whatever was stored
    (grown, shrunk, overlapping, emptied), and the same set saved again stays whole."""
    grows, shrinks, emptied, same = (server_key(100, c) for c in (10, 11, 12, 13))
    await store.run(
        [
            SaveDistilled(row(grows, contributors=(9, 10))),
            SaveDistilled(row(shrinks, contributors=(1, 2, 3, 40))),
            SaveDistilled(row(emptied, contributors=(5,))),
            SaveDistilled(row(same, contributors=(2, 100, 30))),
        ]
    )
    results = await store.run(
        [
            SaveDistilled(row(grows, contributors=(9,))),
            SaveDistilled(row(shrinks, contributors=(2, 3, 4))),
            SaveDistilled(row(grows, contributors=(9, 10, 11, 2**62))),
            SaveDistilled(row(emptied, contributors=())),
            SaveDistilled(row(same, contributors=(2, 100, 30))),
        ]
    )
    assert results[0] == results[2]  # the same row's id
    got = await load(store, grows, shrinks, emptied, same)
    assert got[grows].contributors == {9, 10, 11, 2**62}
    assert got[grows].version == 3
    assert got[shrinks].contributors == {2, 3, 4}
    assert got[emptied].contributors == frozenset()
    assert got[same].contributors == {2, 30, 100}


async def test_saving_the_same_contributors_again_restores_what_was_removed_meanwhile(
    open_store_: StoreOpener,
) -> None:
    """Contributor rows removed by anything but a save (a purge here or in another
    process, a failed batch, a statement of an operator) are written again by the next
    save that names them, even when the save before named the same users."""
    store, other = await open_store_(), await open_store_()
    key = server_key(100, 10)
    users = (7, 8, 9)

    async def contributors() -> set[int]:
        # Read by the other store: a read of this one could hide what it remembers.
        rows = await other.execute("SELECT user_id FROM short_term_memory_contributors")
        return {int(user) for (user,) in rows}

    await store.run([SaveDistilled(row(key, contributors=users))])
    await other.run([PurgeUser(8, None)])  # another process: clears the summary and its credits
    assert await contributors() == set()
    await store.run([SaveDistilled(row(key, contributors=users))])
    assert await contributors() == set(users)

    await store.run([PurgeUser(9, 100)])  # this process
    await store.run([SaveDistilled(row(key, contributors=users))])
    assert await contributors() == set(users)

    bad = replace(row(server_key(1, 2)), scope="nonsense")  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - each driver raises its own error
        await store.run([SaveDistilled(row(key, contributors=(*users, 10))), Touch((bad,))])
    assert await contributors() == set(users)
    await store.run([SaveDistilled(row(key, contributors=(*users, 10)))])
    assert await contributors() == {*users, 10}

    await store.execute("DELETE FROM short_term_memory_contributors")
    await store.run([SaveDistilled(row(key, contributors=(*users, 10)))])
    assert await contributors() == {*users, 10}


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
    shared_here = row(server_key(100, 10), contributors=(7, 8))
    shared_elsewhere = row(server_key(200, 20), contributors=(7,))
    untouched = row(server_key(100, 11), contributors=(8,))
    rows = [own_here, own_elsewhere, own_dm, shared_here, shared_elsewhere, untouched]
    await store.run([SaveDistilled(r) for r in rows])
    await store.run([PurgeUser(7, server)])
    left = await load(store, *(r.key for r in rows))
    if server is None:
        assert set(left) == {shared_here.key, shared_elsewhere.key, untouched.key}
        assert left[shared_elsewhere.key].summary is None
    else:
        assert set(left) == {own_elsewhere.key, own_dm.key, shared_here.key,
                             shared_elsewhere.key, untouched.key}  # fmt: skip
        assert left[shared_elsewhere.key].summary == "remembered"
        assert left[shared_elsewhere.key].contributors == {7}
    assert (left[shared_here.key].summary, left[shared_here.key].categories) == (None, {})
    assert left[shared_here.key].contributors == frozenset()
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
    (count,) = await store.run([DeleteExpired(crude_before, summary_before)])
    assert count == 2
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
GUARDED = row(server_key(100, 10), contributors=(7, 8))


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
    [DeleteChannel(12), PurgeUser(9, None), PurgeUser(7, 200)],
    ids=["other channel", "other user", "contributor in another server"],
)
async def test_an_upgrade_not_overtaken_is_saved(store: Any, delete: Any) -> None:
    after = await store.current_position()
    await store.run([delete])
    (result,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert isinstance(result, int)
    assert (await load(store, GUARDED.key))[GUARDED.key].summary == "remembered"


async def test_a_delete_before_the_view_does_not_refuse(store: Any) -> None:
    await store.run([DeleteChannel(10)])
    after = await store.current_position()
    (result,) = await store.run([SaveDistilled(GUARDED, guard(after))])
    assert isinstance(result, int)


async def test_a_refused_upgrade_does_not_fail_its_batch(store: Any) -> None:
    after = await store.current_position()
    await store.run([DeleteChannel(10)])
    other = row(server_key(100, 12))
    results = await store.run([SaveDistilled(GUARDED, guard(after)), SaveDistilled(other)])
    assert isinstance(results[0], Overtaken) and isinstance(results[1], int)
    assert set(await load(store, GUARDED.key, other.key)) == {other.key}


async def test_an_upgrade_whose_view_was_pruned_is_refused(store: Any) -> None:
    await store.run([DeleteChannel(50), DeleteChannel(51)])
    await store.prune_changes(older_than=time.time() + 60)
    (result,) = await store.run([SaveDistilled(GUARDED, guard(1))])
    assert isinstance(result, Overtaken)
