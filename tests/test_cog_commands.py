"""Slash commands delivered as gateway payloads to a not logged-in bot with the cog loaded."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path

import discord
import pytest
from discord_fakes import BotOpener, harness

from cogs._utils.context import turn_context_from_interaction, turn_context_from_message
from cogs.testing import channel_payload, message_payload, option, subcommand
from host.world import ADMIN, MANAGE_SERVER, Person, Place
from stm import DialogueMessage, DurabilityError, GenerationFinished
from stm._keys import server_key, user_key

EVE = Person(505, "Eve", ADMIN, key="eve")  # a server admin who does not own the bot

BOTH_STORES = True  # each test that opens its bot through ``open_bot`` runs on both stores
SLOW_ON_POSTGRES = True  # the cog sits above the store: PostgreSQL in the full run


def only(replies: list, *, ephemeral: bool = True) -> str:
    assert len(replies) == 1, replies
    assert replies[0].ephemeral is ephemeral
    assert replies[0].allowed_mentions == {"parse": []}
    return replies[0].content


class TestRefresh:
    async def test_clears_the_channel_for_everyone_and_says_so_publicly(self, open_bot: BotOpener):
        """/refresh forgets every scope of this channel, keeps other channels."""
        async with open_bot() as h:
            await h.say(h.alice, h.general, "lisbon trip")
            await h.say(h.alice, h.games, "chess tonight")
            text = only(await h.run("refresh", person=h.bob, place=h.general), ephemeral=False)
            assert "cleared the short-term memory of this channel" in text
            assert await h.memory.get_entry(server_key(1100, h.general.id)) is None
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is None
            assert await h.memory.get_entry(server_key(1100, h.games.id)) is not None

    async def test_has_a_per_user_cooldown(self, open_bot: BotOpener):
        """A second /refresh by the same user is refused; another user may still refresh."""
        async with open_bot() as h:
            await h.run("refresh", person=h.bob, place=h.general)
            await h.say(h.alice, h.general, "still here")
            text = only(await h.run("refresh", person=h.bob, place=h.general))
            assert "Slow down" in text
            assert await h.memory.get_entry(server_key(1100, h.general.id)) is not None
            text = only(await h.run("refresh", person=h.alice, place=h.general), ephemeral=False)
            assert "cleared" in text

    async def test_a_cooldown_is_of_one_bot(self, open_bot: BotOpener):
        """Two bots in one process: a member slowed down in one may still use the other."""
        async with open_bot("one") as first, open_bot("two") as second:
            await first.run("refresh", person=first.bob, place=first.general)
            assert "Slow down" in only(
                await first.run("refresh", person=first.bob, place=first.general)
            )
            text = only(
                await second.run("refresh", person=second.bob, place=second.general),
                ephemeral=False,
            )
            assert "cleared" in text

    async def test_forget_has_a_per_user_cooldown(self, open_bot: BotOpener):
        """A second /memory forget by the same member at once is refused before any preview;
        others may forget."""
        async with open_bot() as h:
            await h.confirmed("memory", subcommand("forget"), person=h.bob, place=h.general)
            await h.say(h.bob, h.general, "said after forgetting")
            (refused,) = await h.run("memory", subcommand("forget"), person=h.bob, place=h.general)
            assert "Slow down" in refused.content and refused.buttons == []
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is not None
            text = only(
                await h.run("memory", subcommand("forget"), person=h.alice, place=h.general)
            )
            assert "This erases what the bot remembers about you" in text

    async def test_works_in_a_dm(self, open_bot: BotOpener):
        async with open_bot() as h:
            dm = h.world.dm(h.alice)
            await h.say(h.alice, dm, "secret plans")
            only(await h.run("refresh", person=h.alice, place=dm), ephemeral=False)
            assert await h.memory.get_entry(user_key(h.alice.id, dm.id)) is None


class TestMemoryShow:
    async def test_shows_your_memory_here_ephemerally(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.say(h.alice, h.general, "I love pastel de nata")
            await h.say(h.bob, h.general, "bob's private thoughts")
            text = only(await h.run("memory", subcommand("show"), person=h.alice, place=h.general))
            assert "pastel de nata" in text
            assert "bob's private thoughts" not in text
            assert "Expires <t:" in text

    async def test_shows_the_shared_notes_of_the_channel(self, open_bot: BotOpener):
        async with open_bot() as h:
            ctx = await h.say(h.alice, h.general, "planning")
            result = await h.memory.run_tool(ctx, {"summary": "Alice plans a **trip**"})
            assert result.success
            text = only(await h.run("memory", subcommand("show"), person=h.bob, place=h.general))
            assert "Shared notes of this channel" in text
            assert "Alice plans a \\*\\*trip\\*\\*" in text  # markdown cannot break the reply

    async def test_says_when_nothing_is_held(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(await h.run("memory", subcommand("show"), person=h.bob, place=h.games))
            assert "holds no short-term memory about you" in text

    async def test_long_content_is_split_into_messages_discord_accepts(self, open_bot: BotOpener):
        async with open_bot(max_messages_per_channel=10) as h:
            for n in range(5):
                await h.say(h.alice, h.general, f"{n} " + "word " * 300, reply="reply " * 300)
            replies = await h.run("memory", subcommand("show"), person=h.alice, place=h.general)
            assert len(replies) > 1
            assert all(len(r.content) <= 2000 and r.ephemeral for r in replies)
            assert {r.kind for r in replies} == {"followup"}  # deferred first, then followups
            joined = "".join(r.content for r in replies)
            assert all(f"{n} word" in joined for n in range(5))


FORGET = subcommand("forget")


async def _wait_for(check, seconds: float = 5.0) -> None:
    """Until ``check()`` holds (a view's timer runs on the real clock)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


class TestForget:
    async def test_forget_shows_what_will_go_and_erases_only_once_confirmed(
        self, open_bot: BotOpener
    ):
        """The preview counts your entries and the shared ones beyond them, with the share of
        this server's memory; nothing goes until Confirm; then the message says what went."""
        async with open_bot(render_mode="supersede") as h:
            dm = h.world.dm(h.alice)
            ctx = await h.say(h.alice, h.general, "alpha secret")
            assert (await h.memory.run_tool(ctx, {"summary": "Alice's alpha plans"})).success
            ctx = await h.say(h.bob, h.general, "bob stays")  # his notes are written from hers
            assert (await h.memory.run_tool(ctx, {"summary": "Bob answers Alice"})).success
            ctx = await h.say(h.carol, h.games, "carol's chess")  # sees #general's notes only
            assert (await h.memory.run_tool(ctx, {"summary": "Carol plays chess"})).success
            await h.say(h.alice, dm, "beta secret")
            await h.memory.flush()
            (preview,) = await h.run("memory", FORGET, person=h.alice, place=h.games)
            assert preview.ephemeral and preview.kind == "followup"
            assert preview.buttons == ["Confirm", "Cancel"]
            # Alice's own: #general's and her DM's. Shared: #general's notes and Bob's entry
            # there, of the 5 distilled entries of Harbor (Carol's two in #games stay).
            assert "- your own entries: **2**" in preview.content
            assert "the notes of **2** shared entries beyond your own" in preview.content
            assert "**2** in this server (40% of what the bot remembers here)" in preview.content
            assert "within 2 minutes" in preview.content
            assert await h.memory.get_entry(user_key(h.alice.id, dm.id)) is not None
            shared = await h.memory.get_entry(server_key(1100, h.general.id))
            assert shared is not None and shared.summary == "Bob answers Alice"

            pressed = await h.click(preview, "Confirm", person=h.alice)
            assert [r.kind for r in pressed] == ["edit", "edit"]
            assert all(r.message_id == preview.message_id and r.ephemeral for r in pressed)
            assert pressed[0].content == "Erasing…" and pressed[0].buttons == []
            assert pressed[-1].content == (
                "Done: the bot's short-term memory about you is erased, in every server and "
                "DM: 2 entries of your own, your recent messages, and the notes of 2 shared "
                "entries."
            )
            assert pressed[-1].allowed_mentions == {"parse": []}
            assert await h.memory.get_entry(user_key(h.alice.id, dm.id)) is None
            shared = await h.memory.get_entry(server_key(1100, h.general.id))
            assert shared is not None and shared.summary is None
            assert [m.content for m in shared.messages if m.role == "user"] == ["bob stays"]
            games = await h.memory.get_entry(server_key(1100, h.games.id))
            assert games is not None and games.summary == "Carol plays chess"

    async def test_only_the_asker_can_answer_and_cancel_erases_nothing(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.say(h.alice, h.general, "alpha secret")
            (preview,) = await h.run("memory", FORGET, person=h.alice, place=h.general)
            (refused,) = await h.click(preview, "Confirm", person=h.bob)
            assert refused.kind == "response" and refused.ephemeral
            assert refused.content == "Only the person who asked for this can answer it."
            assert h.world.offline.current(preview).buttons == ["Confirm", "Cancel"]
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is not None
            (cancelled,) = await h.click(preview, "Cancel", person=h.alice)
            assert cancelled.content == "Cancelled: nothing was erased."
            assert cancelled.buttons == [] and cancelled.message_id == preview.message_id
            with pytest.raises(ValueError, match="not there"):
                await h.click(preview, "Confirm", person=h.alice)
            await h.memory.flush()
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is not None
            assert h.memory.metrics.user_purges == 0

    async def test_an_unanswered_confirmation_expires_and_erases_nothing(self, open_bot: BotOpener):
        async with open_bot(cog_options={"confirm_seconds": 0.05}) as h:
            await h.say(h.alice, h.general, "alpha secret")
            (preview,) = await h.run("memory", FORGET, person=h.alice, place=h.general)
            assert "within 0.05 seconds" in preview.content
            offline = h.world.offline
            await _wait_for(lambda: offline.current(preview).kind == "edit")
            await offline.settle()
            expired = offline.current(preview)
            assert expired.content == "Not confirmed within 0.05 seconds: nothing was erased."
            assert expired.buttons == [] and expired.ephemeral
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is not None
            assert h.memory.metrics.user_purges == 0

    async def test_two_presses_at_once_erase_once(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.say(h.alice, h.general, "alpha secret")
            (preview,) = await h.run("memory", FORGET, person=h.alice, place=h.general)
            offline = h.world.offline
            first, second = (
                offline.component_payload(preview, "Confirm", user=h.alice) for _ in range(2)
            )
            await asyncio.gather(offline.deliver(first), offline.deliver(second))
            answered = [r for r in offline.replies if r.kind == "response"]
            assert [r.content for r in answered] == ["This was already answered."]
            assert offline.current(preview).content.startswith("Done")
            assert h.memory.metrics.user_purges == 1

    async def test_says_plainly_when_the_purge_is_not_durable(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:

            async def failing_flush(**_: object) -> None:
                raise DurabilityError(["purging user 501 everywhere: disk I/O error"])

            writer = h.memory.writer
            writer.flush = failing_flush  # type: ignore[method-assign]
            try:
                _, pressed = await h.confirmed("memory", FORGET, person=h.alice, place=h.games)
            finally:
                del writer.flush
            assert "could not confirm the deletion" in pressed[-1].content
            assert "disk I/O error" in caplog.text

    async def test_a_failing_purge_is_logged_and_apologised_for(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:

            async def broken(*args: object, **kwargs: object) -> None:
                raise RuntimeError("store on fire")

            h.memory.purge = broken  # type: ignore[assignment,method-assign]
            with caplog.at_level(logging.ERROR):
                _, pressed = await h.confirmed("memory", FORGET, person=h.alice, place=h.games)
            assert pressed[-1].content.startswith("Sorry, something went wrong")
            assert "store on fire" not in pressed[-1].content and pressed[-1].buttons == []
            record = next(r for r in caplog.records if r.name == "discord_stm")
            assert record.exc_info is not None and "purge confirmation failed" in record.message

    @pytest.mark.process
    @pytest.mark.parametrize("journal_works", [True, False])
    async def test_says_whether_a_pending_purge_survives_a_restart(
        self, tmp_path: Path, journal_works: bool
    ):
        """The database is locked through the purge: when the pending-change journal took
        it, the reply says it is kept and retried after a restart too; when the journal
        cannot be written either, it says the memory may come back, and promises nothing."""
        from test_faults import write_lock

        journal = tmp_path / "pending"
        if not journal_works:
            (tmp_path / "not-a-folder").write_text("")
            journal = tmp_path / "not-a-folder" / "pending"
        async with harness(tmp_path, busy_timeout_ms=50, journal=str(journal)) as h:
            await h.say(h.alice, h.general, "alpha secret")
            await h.memory.flush()
            (preview,) = await h.run("memory", FORGET, person=h.alice, place=h.games)
            async with write_lock(tmp_path / "stm.sqlite3"):
                pressed = await h.click(preview, "Confirm", person=h.alice)
            text = pressed[-1].content
            if journal_works:
                assert text.startswith("Done") and "also after a restart" in text
                assert "may come back" not in text
            else:
                assert "may come back" in text and "restart" in text
                assert "Done" not in text and "keeps being retried" not in text


class TestRestore:
    """A restore's confirmation speaks of changing notes, not of erasing them."""

    async def _bad_update(self, h) -> None:  # type: ignore[no-untyped-def]
        for text in ("good notes", "bad notes"):
            ctx = await h.say(h.alice, h.general, "hello")
            assert (await h.memory.run_tool(ctx, {"summary": text})).success
        await h.memory.flush()

    async def _preview(self, h):  # type: ignore[no-untyped-def]
        history = await h.memory.history(user_key(h.alice.id, h.general.id))
        good = next(v for v in history if v.summary == "good notes")
        restore = subcommand("restore", option("version", good.version, 4))
        (preview,) = await h.run("memory", restore, person=h.alice, place=h.general)
        assert preview.buttons == ["Confirm", "Cancel"]
        return preview

    async def test_confirmed_it_says_restoring_then_done(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._bad_update(h)
            preview = await self._preview(h)
            pressed = await h.click(preview, "Confirm", person=h.alice)
            assert pressed[0].content == "Restoring…"
            assert pressed[-1].content.startswith("Done: version")
            entry = await h.memory.get_entry(user_key(h.alice.id, h.general.id))
            assert entry is not None and entry.summary == "good notes"

    async def test_cancelled_it_says_nothing_was_changed(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._bad_update(h)
            preview = await self._preview(h)
            (cancelled,) = await h.click(preview, "Cancel", person=h.alice)
            assert cancelled.content == "Cancelled: nothing was changed."
            entry = await h.memory.get_entry(user_key(h.alice.id, h.general.id))
            assert entry is not None and entry.summary == "bad notes"

    async def test_unanswered_it_says_nothing_was_changed(self, open_bot: BotOpener):
        async with open_bot(cog_options={"confirm_seconds": 0.05}) as h:
            await self._bad_update(h)
            preview = await self._preview(h)
            offline = h.world.offline
            await _wait_for(lambda: offline.current(preview).kind == "edit")
            await offline.settle()
            expired = offline.current(preview).content
            assert expired == "Not confirmed within 0.05 seconds: nothing was changed."
            entry = await h.memory.get_entry(user_key(h.alice.id, h.general.id))
            assert entry is not None and entry.summary == "bad notes"

    async def test_the_current_version_is_said_to_be_current(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._bad_update(h)
            history = await h.memory.history(user_key(h.alice.id, h.general.id))
            current = subcommand("restore", option("version", history[0].version, 4))
            (answer,) = await h.run("memory", current, person=h.alice, place=h.general)
            assert answer.content == (
                f"Version {history[0].version} is already the current notes: nothing was changed."
            )
            assert answer.buttons == []

    async def test_a_long_version_is_previewed_in_one_message(self, open_bot: BotOpener):
        """Notes longer than a Discord message are quoted cut, so the preview is sent."""
        async with open_bot(max_summary_length=4000) as h:
            for text in ("good " * 700, "bad notes"):
                ctx = await h.say(h.alice, h.general, "hello")
                assert (await h.memory.run_tool(ctx, {"summary": text})).success
            await h.memory.flush()
            preview = await self._preview_of(h, "good")
            assert len(preview.content) <= 2000 and preview.content.endswith("seconds.")

    async def test_a_restore_the_database_did_not_take_says_so(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:
            await self._bad_update(h)
            preview = await self._preview(h)

            async def failing_flush(**_: object) -> None:
                raise DurabilityError(["restoring: disk I/O error"])

            writer = h.memory.writer
            writer.flush = failing_flush  # type: ignore[method-assign]
            try:
                pressed = await h.click(preview, "Confirm", person=h.alice)
            finally:
                del writer.flush
            assert pressed[-1].content.startswith("**Not done yet:** the database could not")
            assert "deletion" not in pressed[-1].content
            assert "disk I/O error" in caplog.text

    async def _preview_of(self, h, starting: str):  # type: ignore[no-untyped-def]
        history = await h.memory.history(user_key(h.alice.id, h.general.id))
        found = next(v for v in history if (v.summary or "").startswith(starting))
        restore = subcommand("restore", option("version", found.version, 4))
        (preview,) = await h.run("memory", restore, person=h.alice, place=h.general)
        return preview


class TestPauseResume:
    async def test_pause_stops_capture_and_resume_restarts_it(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(await h.run("memory", subcommand("pause"), person=h.alice, place=h.general))
            assert "Paused" in text
            await h.say(h.alice, h.general, "not remembered")
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is None
            shown = only(await h.run("memory", subcommand("show"), person=h.alice, place=h.games))
            assert "You paused" in shown
            text = only(
                await h.run("memory", subcommand("resume"), person=h.alice, place=h.general)
            )
            assert "Resumed" in text
            await h.say(h.alice, h.general, "remembered again")
            entry = await h.memory.get_entry(user_key(h.alice.id, h.general.id))
            assert entry is not None and entry.messages[0].content == "remembered again"

    async def test_a_pause_the_database_has_not_confirmed_is_in_force_and_kept(
        self, tmp_path: Path
    ):
        """The database is locked while a member pauses: the pause is in force at once, the
        reply says it is not stored yet and is retried after a restart too, and it reaches
        the database once the lock goes."""
        async with harness(tmp_path, busy_timeout_ms=50, journal=str(tmp_path / "pending")) as h:
            db = sqlite3.connect(tmp_path / "stm.sqlite3", isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
            try:
                text = only(
                    await h.run("memory", subcommand("pause"), person=h.alice, place=h.general)
                )
            finally:
                db.execute("ROLLBACK")
                db.close()
            assert "Not stored yet" in text and "after a restart" in text
            assert h.memory.is_opted_out(h.alice.id)
            await h.say(h.alice, h.general, "not remembered")
            assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is None
            await h.memory.flush()
            assert h.alice.id in await h.memory.store.load_opt_outs()


class TestPurgeMemory:
    @staticmethod
    def purge(h, target: Person, *, everywhere: bool | None = None) -> tuple:
        options = [option("user", str(target.id), 6)]
        if everywhere is not None:
            options.append(option("everywhere", everywhere, 5))
        return tuple(options), {"resolved_users": [target.payload]}

    async def _setup(self, h) -> None:
        await h.say(h.bob, h.general, "bob in harbor")
        await h.say(h.bob, h.elsewhere, "bob in lighthouse")
        await h.say(h.bob, h.world.dm(h.bob), "bob in dm")

    async def test_a_member_is_refused(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            replies = await h.run(
                "purge-memory", *options, person=h.alice, place=h.general, **extra
            )
            assert "Administrator" in only(replies)
            assert replies[0].buttons == []  # refused before any preview
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is not None

    async def test_manage_server_is_not_enough(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            text = only(
                await h.run("purge-memory", *options, person=h.dan, place=h.general, **extra)
            )
            assert "Administrator" in text

    async def test_an_admin_purges_in_this_server_only(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            preview, pressed = await h.confirmed(
                "purge-memory", *options, person=EVE, place=h.general, **extra
            )
            assert preview.content.startswith(
                f"**This erases what the bot remembers about <@{h.bob.id}> in this server:**"
            )
            assert "- their recent messages in this server" in preview.content
            assert preview.allowed_mentions == {"parse": []}
            assert "erased in this server" in pressed[-1].content
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is None
            assert await h.memory.get_entry(user_key(h.bob.id, h.elsewhere.id)) is not None
            dm = h.world.dm(h.bob)
            assert await h.memory.get_entry(user_key(h.bob.id, dm.id)) is not None

    async def test_everywhere_is_for_the_owner_only(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob, everywhere=True)
            replies = await h.run("purge-memory", *options, person=EVE, place=h.general, **extra)
            assert "Only the bot's owner" in only(replies) and replies[0].buttons == []
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is not None

    async def test_the_owner_without_permissions_may_purge_everywhere(self, open_bot: BotOpener):
        async with open_bot() as h:
            await self._setup(h)
            owner = replace(h.carol, permissions=0)
            options, extra = self.purge(h, h.bob, everywhere=True)
            preview, pressed = await h.confirmed(
                "purge-memory", *options, person=owner, place=h.general, **extra
            )
            assert "in every server and DM:**" in preview.content
            assert "in every server and DM" in pressed[-1].content
            for place in (h.general, h.elsewhere, h.world.dm(h.bob)):
                assert await h.memory.get_entry(user_key(h.bob.id, place.id)) is None

    async def test_the_preview_counts_an_entry_not_written_yet(self, open_bot: BotOpener):
        """Bob's entry still waits for the write-behind: the preview counts it, and the
        purge confirmed after the write-behind wrote it says the same."""
        async with open_bot(write_behind_seconds=3600) as h:
            await h.say(h.alice, h.general, "alice before")
            await h.world.offline.settle()  # the start-up's reads are done
            await h.say(h.bob, h.general, "bob just now")
            await h.world.offline.settle()  # captured: the entry waits for the write-behind
            assert h.memory.writer.write_behind
            options, extra = self.purge(h, h.bob)
            (preview,) = await h.run("purge-memory", *options, person=EVE, place=h.general, **extra)
            assert "- their own entries: **1**" in preview.content
            await h.memory.flush()  # the write-behind is due while the buttons wait
            pressed = await h.click(preview, "Confirm", person=EVE)
            assert "erased in this server: 1 entry of their own" in pressed[-1].content
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is None

    @pytest.mark.parametrize(
        "now",
        [
            pytest.param(0, id="role-taken-away"),
            # Server ownership handed over shows the same way: Discord computes each
            # payload's permissions, and the former owner's no longer hold Administrator.
            pytest.param(MANAGE_SERVER, id="administrator-taken-manage-server-kept"),
        ],
    )
    async def test_a_confirm_pressed_without_the_permission_any_more_is_refused(
        self, open_bot: BotOpener, now: int
    ):
        """Confirm checks the presser's permissions again, from the press itself: lost
        while the buttons waited, the press gets the command's own refusal and nothing
        is erased."""
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            refused = only(
                await h.run(
                    "purge-memory", *options, person=EVE, place=h.general, permissions=now, **extra
                )
            )
            (preview,) = await h.run("purge-memory", *options, person=EVE, place=h.general, **extra)
            assert preview.buttons == ["Confirm", "Cancel"]
            (pressed,) = await h.click(preview, "Confirm", person=EVE, permissions=now)
            assert pressed.content == refused
            assert refused == "You need the **Administrator** permission to use this command."
            assert pressed.message_id == preview.message_id and pressed.buttons == []
            assert pressed.ephemeral and pressed.allowed_mentions == {"parse": []}
            await h.memory.flush()
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is not None
            assert h.memory.metrics.user_purges == 0
            with pytest.raises(ValueError, match="not there"):  # the confirmation is over
                await h.click(preview, "Confirm", person=EVE)

    async def test_the_bots_owner_may_confirm_without_server_permissions(self, open_bot: BotOpener):
        """The owner is admitted by the same checks on the press as on the command."""
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            (preview,) = await h.run(
                "purge-memory", *options, person=h.carol, place=h.general, **extra
            )
            pressed = await h.click(preview, "Confirm", person=h.carol, permissions=0)
            assert "erased in this server" in pressed[-1].content
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is None

    async def test_everywhere_confirmed_by_someone_no_longer_the_owner_is_refused(
        self, open_bot: BotOpener
    ):
        """The owner-only option is checked again on Confirm too (the bot's ownership
        moved to someone else meanwhile), though the server permission still holds."""
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob, everywhere=True)
            (preview,) = await h.run(
                "purge-memory", *options, person=h.carol, place=h.general, **extra
            )
            assert preview.buttons == ["Confirm", "Cancel"]
            h.bot.owner_id = h.dan.id
            (pressed,) = await h.click(preview, "Confirm", person=h.carol)
            assert pressed.content == "Only the bot's owner may do `everywhere:True`."
            assert pressed.buttons == []
            await h.memory.flush()
            for place in (h.general, h.elsewhere, h.world.dm(h.bob)):
                assert await h.memory.get_entry(user_key(h.bob.id, place.id)) is not None
            assert h.memory.metrics.user_purges == 0

    async def test_a_press_whose_payload_names_no_member_is_refused(self, open_bot: BotOpener):
        """A press from the server that does not say who pressed (the member left) is not
        the asker's: refused, nothing erased, the buttons stay for the asker."""
        async with open_bot() as h:
            await self._setup(h)
            options, extra = self.purge(h, h.bob)
            (preview,) = await h.run("purge-memory", *options, person=EVE, place=h.general, **extra)
            offline = h.world.offline
            payload = offline.component_payload(preview, "Confirm", user=EVE)
            del payload["member"]
            (refused,) = await offline.deliver(payload)
            assert refused.kind == "response" and refused.ephemeral
            assert refused.content == "Only the person who asked for this can answer it."
            assert offline.current(preview).buttons == ["Confirm", "Cancel"]
            assert await h.memory.get_entry(user_key(h.bob.id, h.general.id)) is not None
            assert h.memory.metrics.user_purges == 0

    async def test_refused_in_a_dm(self, open_bot: BotOpener):
        async with open_bot() as h:
            options, extra = self.purge(h, h.bob)
            dm = h.world.dm(h.carol)
            text = only(await h.run("purge-memory", *options, person=h.carol, place=dm, **extra))
            assert "only be used in a server" in text

    async def test_an_admin_who_keeps_clearing_shared_notes_is_logged_and_shown(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        """Each round Bob speaks, Alice's notes are written from his words, and Eve purges
        Bob: the third purge within the day is a warning on the cog's logger naming the
        member, the server and the counts; /memory-settings show says what went."""
        async with open_bot() as h:
            options, extra = self.purge(h, h.bob)
            for round_ in range(3):
                await h.say(h.bob, h.general, f"bob's words {round_}")
                ctx = await h.say(h.alice, h.general, "alice answers")
                assert (await h.memory.run_tool(ctx, {"summary": f"notes {round_}"})).success
                with caplog.at_level(logging.WARNING, logger="discord_stm"):
                    _, pressed = await h.confirmed(
                        "purge-memory", *options, person=EVE, place=h.general, **extra
                    )
                assert "the notes of 2 shared entries" in pressed[-1].content
            (warning,) = [
                r
                for r in caplog.records
                if r.name == "discord_stm" and r.levelno == logging.WARNING
            ]
            # Two of Harbor's two distilled entries each time: too few to be a share alert.
            assert warning.getMessage() == (
                f"member {EVE.id} keeps clearing the memory of server 1100 (Harbor): 3 "
                "purges in the last 24 h cleared the notes of 6 shared entries (this one, of "
                f"user {h.bob.id}: 2 of 2)"
            )
            assert h.memory.metrics.repeated_purges == 1
            shown = await h.run("memory-settings", subcommand("show"), person=EVE, place=h.general)
            assert only(shown).endswith(
                "Purges in the last 24 hours (counted by this bot process since it started): "
                "3 cleared the notes of 6 shared entries here."
            )


class TestErrors:
    async def test_unexpected_errors_are_logged_and_apologised_for(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:

            async def broken(key: str) -> None:
                raise RuntimeError("cache on fire")

            h.memory.get_entry = broken  # type: ignore[assignment,method-assign]
            with caplog.at_level(logging.ERROR):
                text = only(
                    await h.run("memory", subcommand("show"), person=h.alice, place=h.general)
                )
            assert text.startswith("Sorry, something went wrong")
            assert "cache on fire" not in text
            record = next(r for r in caplog.records if r.name == "discord_stm")
            assert record.exc_info is not None and "/memory show" in record.getMessage()

    async def test_a_failing_capture_is_logged_with_its_key_and_not_raised(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:

            async def broken(event: object) -> None:
                raise RuntimeError("disk full")

            h.memory.capture = broken  # type: ignore[assignment,method-assign]
            with caplog.at_level(logging.ERROR):
                await h.say(h.alice, h.general, "hello")
            assert "shortterm:server:1100:1101" in caplog.text
            assert "disk full" in caplog.text


FAR = Place("far/lobby", channel_payload(3301, "lobby", 3300))  # a server not in the cache


class TestServersNotInTheCache:
    """Interactions from a server the client has not cached work, and fail closed."""

    async def test_every_member_command_answers(self, open_bot: BotOpener):
        async with open_bot() as h:
            assert h.bot.get_guild(3300) is None
            for name, options in (
                ("memory", [subcommand("show")]),
                ("memory", [subcommand("pause")]),
                ("memory", [subcommand("resume")]),
                ("memory", [subcommand("forget")]),
                ("refresh", []),
            ):
                text = only(
                    await h.run(name, *options, person=h.alice, place=FAR),
                    ephemeral=name != "refresh",
                )
                assert not text.startswith("Sorry"), (name, text)
            text = only(await h.run("memory-settings", subcommand("show"), person=h.dan, place=FAR))
            assert "Short-term memory is **on**" in text

    async def test_the_channel_counts_as_private_and_as_part_of_its_server(
        self, open_bot: BotOpener
    ):
        async with open_bot() as h:
            payload = h.world.offline.interaction_payload(
                "memory", subcommand("show"), user=h.alice.payload, channel=FAR.payload
            )
            interaction = discord.Interaction(data=payload, state=h.bot._connection)  # type: ignore[arg-type]
            ctx = turn_context_from_interaction(interaction)
            assert ctx.server_id == 3300 and ctx.channel_id == 3301
            assert ctx.channel_is_private

    async def test_a_message_there_keeps_its_server(self, open_bot: BotOpener):
        async with open_bot() as h:
            state = h.bot._connection
            channel = discord.PartialMessageable(
                state=state, id=3301, guild_id=3300, type=discord.ChannelType.text
            )
            data = message_payload("hi", author=h.alice.payload, channel_id=3301, message_id=7)
            message = discord.Message(state=state, channel=channel, data=data)  # type: ignore[arg-type]
            ctx = turn_context_from_message(message)
            assert ctx.server_id == 3300 and ctx.channel_is_private


class TestMemoryShowPersonas:
    async def test_persona_memory_is_shown(self, open_bot: BotOpener):
        async with open_bot() as h:
            ctx = h.world.context(h.alice, h.general, "to the pirate", persona_id=7)
            event = GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(role="user", content="ahoy captain", author_id=h.alice.id),
                    DialogueMessage(role="assistant", content="arr"),
                ],
            )
            await h.memory.capture(event)
            assert (await h.memory.run_tool(ctx, {"summary": "Alice sails"})).success
            text = only(await h.run("memory", subcommand("show"), person=h.alice, place=h.general))
            assert "(persona 7)" in text and "ahoy captain" in text
            text = only(await h.run("memory", subcommand("show"), person=h.bob, place=h.general))
            assert "Alice sails" in text and "ahoy captain" not in text

    async def test_persona_notes_are_shown_after_a_restart(self, open_bot: BotOpener):
        """After a restart, a persona that has not talked since is found by its rows."""
        async with open_bot() as h:
            for persona in (7, 8):
                ctx = h.world.context(h.alice, h.general, "hi", persona_id=persona)
                summary = {"summary": f"Persona {persona} notes"}
                assert (await h.memory.run_tool(ctx, summary)).success
        async with open_bot() as h:
            text = only(await h.run("memory", subcommand("show"), person=h.alice, place=h.general))
            assert "Persona 7 notes" in text and "Persona 8 notes" in text
            assert "(persona 7)" in text and "(persona 8)" in text

    async def test_the_console_shows_names_and_relative_times(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.say(h.alice, h.general, "hello")
            (reply,) = await h.run("memory", subcommand("show"), person=h.alice, place=h.general)
            assert "<t:" in reply.content  # Discord clients render this
            text = h.world.readable(reply.content + f" <@{h.bob.id}> <#{h.games.id}>")
            assert "<t:" not in text and "Expires in 12 hours" in text
            assert text.endswith("@Bob #harbor/games")


class TestDeferBeforeWaiting:
    """Commands that wait on the database answer Discord's deadline first (a deferral)."""

    @pytest.mark.parametrize(
        ("name", "options", "person", "method"),
        [
            ("memory", [subcommand("show")], "alice", "get_entry"),
            ("memory", [subcommand("pause")], "alice", "set_user_opt_out"),
            ("memory", [subcommand("resume")], "alice", "set_user_opt_out"),
            ("memory-settings", [subcommand("show")], "dan", "get_server_settings"),
            (
                "memory-settings",
                [subcommand("cadence", option("turns", 3, 4))],
                "dan",
                "update_server_settings",
            ),
            ("memory-settings", [subcommand("enabled", option("enabled", True, 5))], "dan",
             "update_server_settings"),
            ("memory-settings", [subcommand("render-mode", option("mode", "supersede", 3))],
             "dan", "update_server_settings"),
            ("memory-settings", [subcommand("crude-count", option("count", 2, 4))], "dan",
             "update_server_settings"),
            ("memory-settings", [subcommand("categories", subcommand("list"), group=True)],
             "dan", "get_server_settings"),
            (
                "memory-settings",
                [subcommand("categories", subcommand("add", option("label", "Mood", 3)),
                            group=True)],
                "dan",
                "get_server_settings",
            ),
        ],
    )  # fmt: skip
    async def test_deferred_before_the_database_is_asked(
        self, open_bot: BotOpener, name: str, options: list, person: str, method: str
    ):
        async with open_bot() as h:
            entered, gate = asyncio.Event(), asyncio.Event()
            real = getattr(h.memory, method)

            async def held(*args: object, **kwargs: object) -> object:
                entered.set()
                await gate.wait()
                return await real(*args, **kwargs)

            setattr(h.memory, method, held)
            adapter = h.world.offline.adapter
            task = asyncio.create_task(
                h.run(name, *options, person=h.world.people[person], place=h.general)
            )
            await entered.wait()
            callbacks = [path for verb, path in adapter.requests if path.endswith("/callback")]
            assert len(callbacks) == 1  # the deferral went out while the database was busy
            gate.set()
            replies = await task
            assert replies and not replies[0].content.startswith("Sorry")


class TestErrorsForUsers:
    async def test_refused_values_reach_the_user_without_pydantic_text(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(
                await h.run(
                    "memory-settings",
                    subcommand("categories", subcommand("add", option("label", "   ", 3)),
                               group=True),
                    person=h.dan,
                    place=h.general,
                )
            )  # fmt: skip
            assert text.startswith("That was not accepted")
            assert "pydantic" not in text and "http" not in text and "validation error" not in text

    async def test_a_library_value_error_is_logged_and_apologised_for(
        self, open_bot: BotOpener, caplog: pytest.LogCaptureFixture
    ):
        async with open_bot() as h:

            async def broken(*args: object, **kwargs: object) -> None:
                raise ValueError("internal invariant broken at https://example.invalid")

            h.memory.update_server_settings = broken  # type: ignore[method-assign]
            with caplog.at_level(logging.ERROR, logger="discord_stm"):
                text = only(
                    await h.run(
                        "memory-settings",
                        subcommand("cadence", option("turns", 3, 4)),
                        person=h.dan,
                        place=h.general,
                    )
                )
            assert text.startswith("Sorry, something went wrong") and "https" not in text
            (record,) = [r for r in caplog.records if r.name == "discord_stm"]
            message = record.getMessage()
            assert "/memory-settings cadence" in message
            assert f"user {h.dan.id}, channel {h.general.id}, server 1100" in message
