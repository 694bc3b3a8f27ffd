"""An offline Discord: a real, not logged-in bot fed gateway payloads, its answers captured.

Guilds, members, messages, slash-command interactions and button presses reach the bot
through discord.py's own connection state, so parsing, listeners, option conversion,
permission checks and views are discord.py's own; nothing is mocked but the network.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import discord
from discord.ext import commands
from discord.webhook.async_ import async_context

from ._capture import RecordingAdapter, RecordingHTTP, Reply
from ._payloads import (
    APPLICATION_ID,
    TIMESTAMP,
    channel_payload,
    dm_channel_payload,
    guild_payload,
    member_payload,
    message_payload,
    snowflake,
    user_payload,
)

__all__ = ["ADMINISTRATOR", "MANAGE_GUILD", "ListenerFailed", "OfflineDiscord", "Person",
           "Place", "Said", "offline_bot"]  # fmt: skip

ADMINISTRATOR = 1 << 3
MANAGE_GUILD = 1 << 5
_MENTION = re.compile(r"<@!?(\d+)>")
# Tasks discord.py starts for what a payload sets off: event listeners, app commands, a
# view's button callbacks and its timeout callback (not the timer itself: that sleeps).
_DISPATCHED = (
    "discord.py: ",
    "CommandTree-invoker",
    "discord-ui-view-dispatch-",
    "discord-ui-view-timeout-",
)


class ListenerFailed(RuntimeError):
    """A listener raised while handling what the harness delivered (discord.py logged it)."""


@dataclass(frozen=True)
class Person:
    """Someone who talks to the bot; ``permissions`` are theirs in every server."""

    id: int
    name: str
    permissions: int = 0
    bot: bool = False

    @property
    def payload(self) -> dict[str, Any]:
        return user_payload(self.id, self.name, bot=self.bot)

    @property
    def mention(self) -> str:
        return f"<@{self.id}>"


@dataclass(frozen=True)
class Place:
    """A channel (``payload``), named ``key`` in test output: ``server/channel`` or ``dm``."""

    key: str
    payload: dict[str, Any] = field(hash=False)

    @property
    def id(self) -> int:
        return int(self.payload["id"])

    @property
    def guild_id(self) -> int | None:
        guild = self.payload.get("guild_id")
        return int(guild) if guild is not None else None


@dataclass(frozen=True)
class Said:
    """A message a person said through ``say``: its id, channel, author and text."""

    id: int
    channel_id: int
    author: Person
    content: str

    @property
    def message_id(self) -> int:
        return self.id


def _user(who: Person | dict[str, Any]) -> dict[str, Any]:
    return who.payload if isinstance(who, Person) else who


def _channel(where: Place | dict[str, Any]) -> dict[str, Any]:
    return where.payload if isinstance(where, Place) else where


class OfflineDiscord:
    """Feeds gateway payloads to a not logged-in bot and collects what it sends.

    Sets what a login would: the bot's user (named ``bot_name``, so stored lines and
    turn contexts name it right), its member in every guild added (``guild.me``), and
    ``bot.owner_id`` (``owner``, unless the bot already has an owner), so owner checks
    work without asking Discord. Listener errors are collected in ``errors``; with
    ``strict`` (the default) a delivery whose listeners failed raises ``ListenerFailed``.
    """

    def __init__(
        self,
        bot: commands.Bot,
        *,
        bot_name: str = "Assistant",
        bot_id: int = APPLICATION_ID,
        owner: Person | None = None,
        strict: bool = True,
    ) -> None:
        self.bot = bot
        self.strict = strict
        self.replies: list[Reply] = []
        self.adapter = RecordingAdapter(replies=self.replies)
        self.me = Person(bot_id, bot_name, bot=True)
        self.http = RecordingHTTP(self.replies, self.me.payload)
        self.owner = owner or Person(snowflake(), "Owner")
        self.errors: list[tuple[str, BaseException]] = []
        # What people said through say(), oldest first (``said[-1].id`` to delete or edit it).
        self.said: list[Said] = []
        # Channel payloads by id, and by the token of each interaction delivered: where a
        # message with buttons was sent, so that a press comes from there.
        self._channels: dict[int, dict[str, Any]] = {}
        self._interaction_channels: dict[str, dict[str, Any]] = {}
        state = bot._connection
        state.user = discord.ClientUser(state=state, data=self.me.payload)  # type: ignore[arg-type]
        # Only the network is replaced: every request the bot makes ends here.
        bot.http.request = self.http.request  # type: ignore[method-assign]
        if bot.owner_id is None and not bot.owner_ids:
            bot.owner_id = self.owner.id
        self._bot_on_error = bot.on_error
        bot.on_error = self._on_error  # type: ignore[method-assign]

    @property
    def mention(self) -> str:
        """How a person mentions the bot in a message."""
        return self.me.mention

    async def _on_error(self, event: str, *args: Any, **kwargs: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None:
            self.errors.append((event, error))
        await self._bot_on_error(event, *args, **kwargs)

    # -- the world ----------------------------------------------------------------------
    def person(self, name: str, *, permissions: int = 0, user_id: int | None = None) -> Person:
        """A new person (with ``permissions`` wherever they use a command)."""
        return Person(user_id if user_id is not None else snowflake(), name, permissions)

    def add_guild(self, payload: dict[str, Any]) -> discord.Guild:
        """Deliver a GUILD_CREATE (the bot's member added) and return the guild."""
        members = list(payload.get("members") or [])
        if not any(m.get("user", {}).get("id") == str(self.me.id) for m in members):
            members.append(member_payload(self.me.payload))
        self.bot._connection.parse_guild_create({**payload, "members": members})
        for channel in [*(payload.get("channels") or []), *(payload.get("threads") or [])]:
            self._channels[int(channel["id"])] = {**channel, "guild_id": str(payload["id"])}
        guild = self.bot.get_guild(int(payload["id"]))
        if guild is None:
            raise RuntimeError("guild payload was not accepted")
        return guild

    def server(
        self,
        name: str,
        channels: Iterable[str] = ("general",),
        *,
        private: Iterable[str] = (),
        owner: Person | None = None,
        guild_id: int | None = None,
    ) -> dict[str, Place]:
        """A server with text channels (``private`` ones hidden from @everyone), by name."""
        guild = guild_id if guild_id is not None else snowflake()
        hidden = set(private)
        payloads = [
            channel_payload(snowflake(), channel, guild, private=channel in hidden)
            for channel in [*channels, *(p for p in private if p not in channels)]
        ]
        self.add_guild(guild_payload(guild, name, payloads, owner_id=(owner or self.owner).id))
        return {c["name"]: Place(f"{name}/{c['name']}", c) for c in payloads}

    def dm(self, person: Person) -> Place:
        """``person``'s DM channel with the bot."""
        place = Place("dm", dm_channel_payload(9_000_000 + person.id % 1_000_000, person.payload))
        self._channels[place.id] = place.payload
        return place

    def message(self, person: Person, place: Place, text: str) -> discord.Message:
        """The ``discord.Message`` the gateway would deliver for ``person`` saying ``text``."""
        data: Any = self._message_data(person, place, text)
        channel = self._channel_of(place)
        return discord.Message(state=self.bot._connection, channel=channel, data=data)

    def _message_data(self, person: Person, place: Place, text: str) -> dict[str, Any]:
        known = {self.me.id: self.me.payload}
        mentioned = [known.get(int(i), user_payload(int(i), i)) for i in _MENTION.findall(text)]
        data = message_payload(text, author=person.payload, channel_id=place.id, mentions=mentioned)
        if place.guild_id is not None:
            data["guild_id"] = str(place.guild_id)
            data["member"] = {
                k: v for k, v in member_payload(person.payload).items() if k != "user"
            }
        return data

    def _channel_of(self, place: Place) -> Any:
        state = self.bot._connection
        if place.guild_id is None:
            return discord.DMChannel(me=state.user, state=state, data=place.payload)  # type: ignore[arg-type]
        guild = self.bot.get_guild(place.guild_id)
        channel = guild.get_channel_or_thread(place.id) if guild else None
        if channel is None:
            raise RuntimeError(f"{place.key}: add its server first")
        return channel

    # -- delivering ---------------------------------------------------------------------
    async def _settle(self, before: set[asyncio.Task[Any]], start: int) -> list[Reply]:
        """Wait for every listener and command the delivery set off, and theirs in turn."""
        seen = set(before)
        failed = len(self.errors)
        while True:
            await asyncio.sleep(0)
            new = {t for t in asyncio.all_tasks() - seen if t.get_name().startswith(_DISPATCHED)}
            if not new:
                break
            seen |= new
            await asyncio.gather(*new, return_exceptions=True)
        if self.strict and len(self.errors) > failed:
            event, error = self.errors[failed]
            raise ListenerFailed(f"{event} failed: {type(error).__name__}: {error}") from error
        return self.replies[start:]

    async def _deliver(self, parse: Callable[[], None]) -> list[Reply]:
        start = len(self.replies)
        before = asyncio.all_tasks()
        token = async_context.set(self.adapter)
        try:
            parse()
        finally:
            async_context.reset(token)
        return await self._settle(before, start)

    async def say(self, person: Person, place: Place, text: str) -> list[Reply]:
        """``person`` says ``text`` in ``place`` (MESSAGE_CREATE); returns what the bot sent.

        Mention the bot with ``offline.mention`` in the text where the bot needs it.
        """
        data = self._message_data(person, place, text)
        self._channel_of(place)  # a clear error for a channel of an unknown server
        self.http.said(place.id, data)
        self.said.append(Said(int(data["id"]), place.id, person, text))
        return await self._deliver(lambda: self.bot._connection.parse_message_create(data))  # type: ignore[arg-type]

    async def gateway(self, event: str, data: dict[str, Any]) -> list[Reply]:
        """Deliver any gateway event (``"MESSAGE_DELETE"``, ``"MESSAGE_UPDATE"``,
        ``"GUILD_DELETE"``, ...) with its payload through discord.py's own parsing, and
        wait for every listener it sets off; returns what the bot sent."""
        parse = getattr(self.bot._connection, f"parse_{event.lower()}", None)
        if parse is None:
            raise ValueError(f"discord.py does not parse a gateway event {event!r}")
        return await self._deliver(lambda: parse(data))

    async def settle(self) -> None:
        """Wait for listeners set off outside the harness (``bot.dispatch`` in a test)."""
        await self._settle(set(), len(self.replies))

    # -- what changes on Discord --------------------------------------------------------
    def _message_ref(self, message: Said | Reply | int) -> tuple[int, int | None, Person | None]:
        """(id, channel id or None, author or None) of a message said, sent or named by id."""
        if isinstance(message, Said):
            return message.id, message.channel_id, message.author
        if isinstance(message, Reply):
            if message.message_id is None:
                raise ValueError("that reply has no message id (an ephemeral response?)")
            return message.message_id, message.channel_id, self.me
        if isinstance(message, int) and not isinstance(message, bool):
            return message, None, None
        raise TypeError(f"a message is a Said, a Reply or an id, not {type(message).__name__}")

    def _where(self, place: Place | None, channel_id: int | None) -> dict[str, Any]:
        if place is not None:
            return place.payload
        if channel_id is not None and channel_id in self._channels:
            return self._channels[channel_id]
        raise ValueError("say in which channel the message is: pass place=")

    @staticmethod
    def _located(data: dict[str, Any], channel: dict[str, Any]) -> dict[str, Any]:
        data["channel_id"] = str(channel["id"])
        if channel.get("guild_id") is not None:
            data["guild_id"] = str(channel["guild_id"])
        return data

    async def delete(self, message: Said | Reply | int, *, place: Place | None = None) -> None:
        """Someone deletes ``message`` (``offline.said[-1]``, a reply of the bot, or an id
        with its ``place``) on Discord: a MESSAGE_DELETE."""
        message_id, channel_id, _ = self._message_ref(message)
        channel = self._where(place, channel_id)
        await self.gateway("MESSAGE_DELETE", self._located({"id": str(message_id)}, channel))

    async def delete_bulk(
        self, messages: Iterable[Said | Reply | int], *, place: Place | None = None
    ) -> None:
        """A moderator deletes ``messages`` of one channel at once: a MESSAGE_DELETE_BULK."""
        refs = [self._message_ref(message) for message in messages]
        if not refs:
            raise ValueError("delete_bulk needs at least one message")
        channels = {channel for _, channel, _ in refs if channel is not None}
        if len(channels) > 1:
            raise ValueError("a bulk delete is of one channel's messages")
        channel = self._where(place, next(iter(channels), None))
        ids = [str(message_id) for message_id, _, _ in refs]
        await self.gateway("MESSAGE_DELETE_BULK", self._located({"ids": ids}, channel))

    async def edit(
        self,
        message: Said | Reply | int,
        text: str,
        *,
        author: Person | None = None,
        place: Place | None = None,
    ) -> list[Reply]:
        """Its author edits ``message`` to read ``text``: a full MESSAGE_UPDATE, as Discord
        sends an author's edit (``type``, ``edited_timestamp`` and all). A message named by
        id needs its ``author`` and ``place``. Returns what the bot sent in answer."""
        message_id, channel_id, said_by = self._message_ref(message)
        who = said_by or author
        if who is None:
            raise ValueError("say who wrote the message: pass author=")
        channel = self._where(place, channel_id)
        known = {self.me.id: self.me.payload}
        mentioned = [known.get(int(i), user_payload(int(i), i)) for i in _MENTION.findall(text)]
        data = message_payload(
            text, author=who.payload, channel_id=int(channel["id"]), message_id=message_id,
            mentions=mentioned,
        )  # fmt: skip
        data["edited_timestamp"] = discord.utils.utcnow().isoformat()
        if channel.get("guild_id") is not None:
            data["guild_id"] = str(channel["guild_id"])
            data["member"] = {k: v for k, v in member_payload(who.payload).items() if k != "user"}
        return await self.gateway("MESSAGE_UPDATE", data)

    async def channel_update(
        self, place: Place, *, name: str | None = None, private: bool | None = None
    ) -> Place:
        """An admin renames ``place`` or changes who may view it (``private``): a
        CHANNEL_UPDATE. Returns the channel as it is now."""
        if place.guild_id is None:
            raise ValueError("only a server's channel can be updated")
        data = dict(place.payload)
        if name is not None:
            data["name"] = name
        if private is not None:
            fresh = channel_payload(place.id, data["name"], place.guild_id, private=private)
            data["permission_overwrites"] = fresh["permission_overwrites"]
        self._channels[place.id] = data
        await self.gateway("CHANNEL_UPDATE", data)
        return Place(place.key.rsplit("/", 1)[0] + "/" + data["name"], data)

    async def channel_delete(self, place: Place) -> None:
        """An admin deletes the channel or thread ``place``: a CHANNEL_DELETE (a
        THREAD_DELETE for a thread)."""
        if place.guild_id is None:
            raise ValueError("only a server's channel can be deleted")
        self._channels.pop(place.id, None)
        if place.payload.get("type") in (11, 12):
            thread = {
                "id": str(place.id),
                "guild_id": str(place.guild_id),
                "parent_id": place.payload.get("parent_id"),
                "type": place.payload["type"],
            }
            await self.gateway("THREAD_DELETE", thread)
        else:
            await self.gateway("CHANNEL_DELETE", place.payload)

    async def member_leave(self, person: Person, server: Place | int) -> None:
        """``person`` leaves (or is kicked from) the server ``server`` is a channel of (or
        the server of that id): a GUILD_MEMBER_REMOVE."""
        guild_id = server.guild_id if isinstance(server, Place) else server
        if guild_id is None:
            raise ValueError("a DM is not a server")
        await self.gateway(
            "GUILD_MEMBER_REMOVE", {"guild_id": str(guild_id), "user": person.payload}
        )

    async def guild_remove(self, server: Place | int) -> None:
        """The bot is removed from the server (kicked, banned, the server deleted): a
        GUILD_DELETE without ``unavailable``, which is not an outage."""
        guild_id = server.guild_id if isinstance(server, Place) else server
        if guild_id is None:
            raise ValueError("a DM is not a server")
        await self.gateway("GUILD_DELETE", {"id": str(guild_id)})

    def interaction_payload(
        self,
        command: str,
        *options: dict[str, Any],
        user: Person | dict[str, Any],
        channel: Place | dict[str, Any],
        permissions: int | None = None,
        resolved_users: Iterable[Person | dict[str, Any]] = (),
        locale: str = "en-US",
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for ``/command`` used by ``user`` in ``channel``,
        whose Discord client is set to ``locale`` (``"ja"``, ``"fr"``, ...)."""
        data: dict[str, Any] = {
            "id": str(snowflake()),
            "name": command,
            "type": 1,
            "options": list(options),
        }
        resolved = [_user(u) for u in resolved_users]
        if resolved:
            data["resolved"] = {"users": {u["id"]: u for u in resolved}}
        return self._interaction(2, data, user, _channel(channel), permissions, locale)

    def component_payload(
        self,
        reply: Reply,
        button: str,
        *,
        user: Person | dict[str, Any],
        permissions: int | None = None,
        locale: str = "en-US",
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload (type 3) for ``user`` pressing the button labelled
        (or with the custom id) ``button`` on the message ``reply`` is, as it reads now."""
        message = self.current(reply)
        pressed = next(
            (
                b
                for b in message.button_payloads()
                if button in (b.get("label"), b.get("custom_id"))
            ),
            None,
        )
        if pressed is None or pressed.get("disabled"):
            shown = ", ".join(message.buttons) or "none"
            state = "is disabled" if pressed is not None else "is not there"
            raise ValueError(f"button {button!r} {state} on that message (buttons: {shown})")
        channel = self._channel_of_reply(message)
        data = {"custom_id": pressed["custom_id"], "component_type": 2}
        payload = self._interaction(3, data, user, channel, permissions, locale)
        sent = message_payload(
            message.content, author=self.me.payload, channel_id=int(channel["id"]),
            message_id=message.message_id,
        )  # fmt: skip
        sent["components"] = message.components
        sent["flags"] = 64 if message.ephemeral else 0
        if "guild_id" in channel:
            sent["guild_id"] = channel["guild_id"]
        payload["message"] = sent
        # Its response edits the message pressed on.
        assert message.message_id is not None
        self.adapter.originals[payload["token"]] = message.message_id
        return payload

    def current(self, reply: Reply) -> Reply:
        """The message ``reply`` is, as it reads now (after its edits)."""
        found = self.adapter.current(reply.message_id)
        return reply if found is None else found

    def _channel_of_reply(self, message: Reply) -> dict[str, Any]:
        if message.channel_id is not None and message.channel_id in self._channels:
            return self._channels[message.channel_id]
        token = self.adapter.tokens.get(message.message_id or 0)
        channel = self._interaction_channels.get(token or "")
        if channel is None:
            raise ValueError("that message was not sent by the bot through this harness")
        return channel

    def _interaction(
        self,
        kind: int,
        data: dict[str, Any],
        user: Person | dict[str, Any],
        channel_data: dict[str, Any],
        permissions: int | None,
        locale: str,
    ) -> dict[str, Any]:
        if not isinstance(locale, str) or not locale:
            raise ValueError(f"locale must be a Discord locale such as 'ja', not {locale!r}")
        if permissions is None:
            permissions = user.permissions if isinstance(user, Person) else 0
        user_data = _user(user)
        token = f"token-{snowflake()}"
        self._interaction_channels[token] = channel_data
        payload: dict[str, Any] = {
            "id": str(snowflake()),
            "application_id": str(self.me.id),
            "type": kind,
            "token": token,
            "version": 1,
            "data": data,
            "channel_id": channel_data["id"],
            "channel": channel_data,
            "locale": locale,
            "attachment_size_limit": 8 * 1024 * 1024,
            "app_permissions": "0",
            "entitlements": [],
        }
        if "guild_id" in channel_data:
            payload["guild_id"] = channel_data["guild_id"]
            payload["member"] = {
                **member_payload(user_data),
                "joined_at": TIMESTAMP,
                "permissions": str(permissions),
            }
            payload["context"] = 0
        else:
            payload["user"] = user_data
            payload["context"] = 1
        return payload

    async def deliver(self, payload: dict[str, Any]) -> list[Reply]:
        """Deliver an INTERACTION_CREATE, wait for what it set off (a command, a button's
        callback) to finish; returns its replies."""
        return await self._deliver(
            lambda: self.bot._connection.parse_interaction_create(payload)  # type: ignore[arg-type]
        )

    async def command(
        self,
        command: str,
        *options: dict[str, Any],
        user: Person | dict[str, Any],
        channel: Place | dict[str, Any],
        permissions: int | None = None,
        resolved_users: Iterable[Person | dict[str, Any]] = (),
        locale: str = "en-US",
    ) -> list[Reply]:
        """``user`` uses ``/command`` in ``channel``; returns the bot's replies.

        ``permissions`` (a bit field) defaults to the person's own; a user option needs
        that user in ``resolved_users``, as Discord sends it; ``locale`` is the language
        the person's Discord client is set to (``"ja"``: the replies come in Japanese).
        """
        payload = self.interaction_payload(
            command,
            *options,
            user=user,
            channel=channel,
            permissions=permissions,
            resolved_users=resolved_users,
            locale=locale,
        )
        return await self.deliver(payload)

    async def click(
        self,
        reply: Reply,
        button: str,
        *,
        user: Person | dict[str, Any],
        permissions: int | None = None,
        locale: str = "en-US",
    ) -> list[Reply]:
        """``user`` presses ``button`` (its label or custom id) on the message ``reply`` is;
        returns what the bot sent in answer (edits of that message, new messages).

        The button must be on the message as it reads now (``current``), enabled; the
        press comes from the channel the message was sent in.
        """
        return await self.deliver(self.component_payload(reply, button, user=user,
                                                         permissions=permissions,
                                                         locale=locale))  # fmt: skip


@asynccontextmanager
async def offline_bot(bot: commands.Bot, **options: Any) -> AsyncIterator[OfflineDiscord]:
    """Start ``bot`` offline: its ``setup_hook`` runs as at login; closed (cogs unloaded) after.

    ``options`` go to ``OfflineDiscord`` (``bot_name``, ``owner``, ``strict``).
    """
    async with bot:
        offline = OfflineDiscord(bot, **options)
        await bot.setup_hook()
        yield offline
