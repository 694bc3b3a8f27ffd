"""What Discord tells the bot, applied to the memory: messages deleted and edited, channels
and threads deleted, servers that removed the bot, members who left or were banned (the
base of the cog, which provides ``memory``).

Raw events, so they work without discord.py's message cache. Each event applied is
counted (``memory.metrics.discord_events``) and logged; a failure is logged, never
raised into discord.py's dispatch. What each event removes is listed in docs/data.md.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

import discord
from discord.ext import commands

from stm import ShortTermMemory

__all__ = ["DiscordEvents", "readable_content"]

log = logging.getLogger("discord_stm")

_MESSAGE_EVENTS = frozenset({"message_delete", "bulk_message_delete", "message_edit"})
# How often servers past their grace period are looked for, at most.
DEPARTURES_CHECK_SECONDS = 60.0


def readable_content(data: Any, bot_id: int | None) -> str | None:
    """The text of a MESSAGE_UPDATE payload as the memory holds a message: the bot's
    mention taken out (hosts strip it from what they capture) and blanks trimmed; None
    when there is no readable text (an empty content: the Message Content intent missing,
    or only attachments left)."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, str):
        return None
    if bot_id is not None:
        for form in (f"<@{bot_id}>", f"<@!{bot_id}>"):
            content = content.replace(form, "")
    content = content.strip()
    return content or None


class DiscordEvents(commands.Cog):
    """Listeners for Discord's own deletes and edits."""

    memory: ShortTermMemory
    bot: commands.Bot

    def _open(self) -> bool:
        memory = getattr(self, "memory", None)
        return memory is not None and not memory.closed

    async def _apply(self, kind: str, what: str, work: Awaitable[Any]) -> Any:
        """Run ``work`` for one event of ``kind``, count it and log a failure."""
        try:
            result = await work
        except Exception:
            log.exception("short-term memory could not apply %s (%s)", kind, what)
            return None
        self.memory.count_event(kind)
        # Deletes and edits come for every message the bot can see: the memory logs those
        # that changed something; the rest are counted, and logged at DEBUG.
        level = logging.DEBUG if kind in _MESSAGE_EVENTS else logging.INFO
        log.log(level, "short-term memory applied %s (%s)", kind, what)
        return result

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        """A message deleted: it leaves every window that holds it, in every process."""
        if not self._open():
            return
        await self._apply(
            "message_delete",
            f"message {payload.message_id} in channel {payload.channel_id}",
            self.memory.forget_messages(payload.channel_id, [payload.message_id]),
        )

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        """Messages deleted at once (a moderator's purge): as many single deletes."""
        if not self._open():
            return
        await self._apply(
            "bulk_message_delete",
            f"{len(payload.message_ids)} messages in channel {payload.channel_id}",
            self.memory.forget_messages(payload.channel_id, sorted(payload.message_ids)),
        )

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A message edited: its held text is replaced, or it leaves the windows when the
        new text cannot be read. An update that is not the author's edit (an embed
        appearing, a pin: no ``edited_timestamp``) or carries no content changes nothing."""
        if not self._open() or not isinstance(payload.data, dict) or "content" not in payload.data:
            return
        if payload.data.get("edited_timestamp") is None:
            return
        me = self.bot.user
        text = readable_content(payload.data, me.id if me is not None else None)
        await self._apply(
            "message_edit",
            f"message {payload.message_id} in channel {payload.channel_id}",
            self.memory.edit_message(payload.channel_id, payload.message_id, text),
        )

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        """A channel deleted: its memory is cleared, as ``/refresh`` does."""
        if not self._open():
            return
        await self._apply(
            "channel_delete",
            f"channel {channel.id}",
            self.memory.clear_short_term_memory_for_channel(channel.id),
        )

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A thread deleted: its memory is cleared, as ``/refresh`` does."""
        if not self._open():
            return
        await self._apply(
            "thread_delete",
            f"thread {payload.thread_id}",
            self.memory.clear_short_term_memory_for_channel(payload.thread_id),
        )

    # -- servers ------------------------------------------------------------------------
    def start_departures(self) -> None:
        """Look for servers past their grace period now and then (the cog, once open)."""
        grace = self.memory.config.server_removal_grace_minutes * 60
        every = max(1.0, min(DEPARTURES_CHECK_SECONDS, grace / 4 or DEPARTURES_CHECK_SECONDS))
        self.memory.background.every(every, self._departures_due, "stm-departures")

    async def _departures_due(self) -> None:
        # Before the gateway said which servers the bot is in, every server looks left.
        if self.bot.is_ready():
            await self.clear_departed_servers()

    async def clear_departed_servers(self) -> list[int]:
        """Clear the servers removed from longer ago than the grace period (a restart in
        between included); a server the bot is in again keeps its memory."""
        if not self._open():
            return []
        cleared: list[int] = await self.memory.clear_departed_servers(
            present=lambda server_id: self.bot.get_guild(server_id) is not None
        )
        return cleared

    @commands.Cog.listener()
    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """The bot was removed from a server (kicked, banned, the server deleted): its memory
        and settings are cleared after the grace period. An outage is not a removal:
        discord.py then dispatches ``guild_unavailable``, which clears nothing."""
        if not self._open():
            return
        await self._apply(
            "guild_remove", f"server {guild.id}", self.memory.server_removed(guild.id)
        )

    @commands.Cog.listener()
    async def on_guild_join(self, guild: discord.Guild) -> None:
        """Invited (again): a removal of this server still in its grace period is forgotten."""
        await self._returned(guild)

    @commands.Cog.listener()
    async def on_guild_available(self, guild: discord.Guild) -> None:
        await self._returned(guild)

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        """After a (re)start: servers the bot is in again keep their memory."""
        if not self._open():
            return
        try:
            departed = await self.memory.departures()
        except Exception:
            log.exception("short-term memory could not read the servers that removed the bot")
            return
        for server_id in departed:
            guild = self.bot.get_guild(server_id)
            if guild is not None:
                await self._returned(guild)
        if not self._sees_every_server():
            return
        # Removed while the bot was offline: no GUILD_DELETE ever comes, so a server with
        # settings that the bot is not in now starts its grace period here (an outage
        # still lists the server, as unavailable).
        for server_id in self.memory.configured_servers():
            if server_id not in departed and self.bot.get_guild(server_id) is None:
                await self._apply(
                    "guild_remove",
                    f"server {server_id} (removed while the bot was offline)",
                    self.memory.server_removed(server_id),
                )

    def _sees_every_server(self) -> bool:
        """True when ``bot.guilds`` lists every server the bot is in: the guilds intent is
        on and this process runs every shard (another process's shards have servers of
        their own, which must not count as removed)."""
        if not self.bot.intents.guilds:
            return False
        count = self.bot.shard_count
        if count is None or count <= 1:
            return True
        shards = getattr(self.bot, "shard_ids", None)
        every = shards is None or len(set(shards)) == count
        return isinstance(self.bot, discord.AutoShardedClient) and every

    # -- members ------------------------------------------------------------------------
    @commands.Cog.listener()
    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        """A member left or was kicked (needs the members intent): purged in that server
        when its ``purge_leavers`` setting is on, as ``/purge-memory`` does."""
        await self._member_gone("member_remove", payload.guild_id, payload.user.id)

    @commands.Cog.listener()
    async def on_member_ban(
        self, guild: discord.Guild, user: discord.User | discord.Member
    ) -> None:
        """A member banned: as a member who left."""
        await self._member_gone("member_ban", guild.id, user.id)

    async def _member_gone(self, kind: str, server_id: int, user_id: int) -> None:
        me = self.bot.user
        if not self._open() or (me is not None and user_id == me.id):
            return
        if not self.memory.settings_for(server_id).purge_leavers:
            return
        await self._apply(
            kind,
            f"user {user_id} in server {server_id}",
            self.memory.purge(user_id, server_id),
        )

    async def _returned(self, guild: discord.Guild) -> None:
        if not self._open():
            return
        try:
            back = await self.memory.server_returned(guild.id)
        except Exception:
            log.exception("short-term memory could not note its return to server %s", guild.id)
            return
        if back:
            self.memory.count_event("guild_return")
