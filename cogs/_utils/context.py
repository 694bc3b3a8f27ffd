"""Building a ``TurnContext`` from Discord objects, so hosts never hand-assemble ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import discord

from stm import TurnContext

__all__ = [
    "channel_is_private",
    "channel_privacy",
    "turn_context_from_interaction",
    "turn_context_from_message",
]


def channel_is_private(channel: Any) -> bool:
    """True when @everyone cannot see the channel (private threads included).

    A channel we cannot resolve counts as private: leaking its memory into
    other channels is worse than not recalling it.
    """
    if isinstance(channel, discord.abc.PrivateChannel):
        return True
    if isinstance(channel, discord.Thread):
        if channel.is_private():
            return True
        parent = channel.parent
        if parent is None:
            return True
        channel = parent
    guild = getattr(channel, "guild", None)
    if guild is None or not hasattr(channel, "permissions_for"):
        return True
    # A guild the client has not cached (still streaming in at start-up, no guilds intent,
    # a user-installed app) has no roles to ask: its channels count as private.
    everyone = getattr(guild, "default_role", None)
    if everyone is None or getattr(guild, "unavailable", False):
        return True
    try:
        return not channel.permissions_for(everyone).view_channel
    except (discord.ClientException, AttributeError):
        return True


def channel_privacy(client: discord.Client) -> Callable[[TurnContext], bool]:
    """What the cog tells the memory about a server channel a turn's context calls public:
    Discord's own view, so a host that built its context without the flag (a thread of a
    private channel above all) leaks nothing. A thread is private when its parent is; a
    thread the client has not cached counts as private; another channel it has not
    cached is left to the host."""

    def is_private(ctx: TurnContext) -> bool:
        channel = client.get_channel(ctx.channel_id)
        if channel is None:
            return ctx.parent_channel_id is not None
        return channel_is_private(channel)

    return is_private


def _channel_name(channel: Any) -> str | None:
    name = getattr(channel, "name", None)
    return name if isinstance(name, str) and name else None


def _turn_context(
    *,
    user: discord.abc.User,
    channel: Any,
    guild: discord.Guild | None,
    server_id: int | None,
    me: discord.abc.User | None,
    user_text: str,
    persona_id: int | None,
    bot_name: str | None,
    message_id: int | None = None,
    locale: object = None,
) -> TurnContext:
    if channel is None:
        raise ValueError("this interaction has no channel; short-term memory needs one")
    parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
    in_server = server_id is not None
    server_name = getattr(guild, "name", None) if guild is not None else None
    return TurnContext(
        user_id=user.id,
        channel_id=channel.id,
        server_id=server_id,
        persona_id=persona_id,
        user_name=user.display_name,
        bot_name=bot_name or (me.display_name if me is not None else "Assistant"),
        channel_name=_channel_name(channel) if in_server else None,
        server_name=server_name if isinstance(server_name, str) and server_name else None,
        parent_channel_id=parent_id,
        channel_is_private=channel_is_private(channel) if in_server else False,
        user_text=user_text,
        message_id=message_id,
        server_locale=_locale(guild, locale) if in_server else None,
    )


def _locale(guild: discord.Guild | None, given: object) -> str | None:
    """The server's preferred locale (``ja``, ``en-US``), as Discord gives it, or None."""
    locale = given if given is not None else getattr(guild, "preferred_locale", None)
    value = getattr(locale, "value", locale)
    return value if isinstance(value, str) and value else None


def turn_context_from_message(
    message: discord.Message,
    *,
    persona_id: int | None = None,
    bot_name: str | None = None,
    user_text: str | None = None,
) -> TurnContext:
    """The ``TurnContext`` of a generation triggered by ``message``.

    ``user_text`` defaults to the message's content; pass the text with the
    bot's mention stripped when the host strips it. ``message_id`` is the message's
    id: pass it on as the user's ``DialogueMessage(message_id=ctx.message_id)``, so that
    deleting or editing the message on Discord reaches the memory.
    """
    me = message.guild.me if message.guild is not None else getattr(message.channel, "me", None)
    return _turn_context(
        user=message.author,
        channel=message.channel,
        guild=message.guild,
        # A channel of a server the client has not cached still knows its server.
        server_id=message.guild.id
        if message.guild is not None
        else getattr(message.channel, "guild_id", None),
        me=me,
        user_text=message.content if user_text is None else user_text,
        persona_id=persona_id,
        bot_name=bot_name,
        message_id=message.id,
    )


def turn_context_from_interaction(
    interaction: discord.Interaction[Any],
    *,
    persona_id: int | None = None,
    bot_name: str | None = None,
) -> TurnContext:
    """The ``TurnContext`` of the place where a slash command was used.

    Works where the client has not cached the server: the server comes from the
    interaction's ``guild_id``, and a channel whose privacy cannot be read counts as
    private.
    """
    guild = interaction.guild
    me = guild.me if guild is not None else None
    return _turn_context(
        user=interaction.user,
        channel=interaction.channel,
        guild=guild,
        server_id=interaction.guild_id,
        me=me or interaction.client.user,
        user_text="",
        persona_id=persona_id,
        bot_name=bot_name,
        locale=interaction.guild_locale,
    )
