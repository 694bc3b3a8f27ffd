"""An offline Discord for the demo, the console and tests.

Gateway payloads (guilds, channels, members, slash-command interactions)
are fed to a real, not logged-in ``commands.Bot`` through its own connection
state, so option parsing and permission checks are discord.py's own. Replies
are captured by a webhook adapter at the last step before the network.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import discord
from discord.ext import commands
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

__all__ = [
    "APPLICATION_ID",
    "VIEW_CHANNEL",
    "OfflineDiscord",
    "RecordingAdapter",
    "Reply",
    "channel_payload",
    "dm_channel_payload",
    "guild_payload",
    "message_payload",
    "option",
    "subcommand",
    "user_payload",
]

APPLICATION_ID = 900_000_000_000_000_001
VIEW_CHANNEL = 1 << 10
TIMESTAMP = "2025-01-01T00:00:00+00:00"
_ids = itertools.count(1_000_000_000_000_000)


def _snowflake() -> int:
    return next(_ids)


def user_payload(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    """A Discord user object."""
    return {
        "id": str(user_id),
        "username": name.lower(),
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


def channel_payload(
    channel_id: int,
    name: str,
    guild_id: int,
    *,
    private: bool = False,
    kind: int = 0,
    parent_id: int | None = None,
) -> dict[str, Any]:
    """A guild channel; ``private`` denies View Channel to @everyone. ``kind`` 11/12: threads."""
    data: dict[str, Any] = {
        "id": str(channel_id),
        "type": kind,
        "name": name,
        "guild_id": str(guild_id),
        "position": 0,
        "nsfw": False,
        "permission_overwrites": [],
        "parent_id": str(parent_id) if parent_id else None,
    }
    if private:
        data["permission_overwrites"] = [
            {"id": str(guild_id), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
        ]
    if kind in (11, 12):
        data["owner_id"] = "1"
        data["message_count"] = 0
        data["member_count"] = 1
        data["thread_metadata"] = {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": TIMESTAMP,
            "locked": False,
        }
    return data


def guild_payload(
    guild_id: int, name: str, channels: list[dict[str, Any]], *, owner_id: int = 1
) -> dict[str, Any]:
    """A GUILD_CREATE payload: @everyone may view channels and send messages."""
    everyone = VIEW_CHANNEL | (1 << 11) | (1 << 31)
    return {
        "id": str(guild_id),
        "name": name,
        "owner_id": str(owner_id),
        "unavailable": False,
        "member_count": 2,
        "roles": [
            {
                "id": str(guild_id),
                "name": "@everyone",
                "permissions": str(everyone),
                "position": 0,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            }
        ],
        "channels": [c for c in channels if c["type"] not in (11, 12)],
        "threads": [c for c in channels if c["type"] in (11, 12)],
        "members": [],
        "emojis": [],
        "stickers": [],
        "features": [],
        "preferred_locale": "en-US",
    }


def option(name: str, value: Any, kind: int) -> dict[str, Any]:
    """A command option: kind 3 string, 4 integer, 5 boolean, 6 user."""
    return {"name": name, "type": kind, "value": value}


def subcommand(name: str, *options: dict[str, Any], group: bool = False) -> dict[str, Any]:
    """A subcommand (or, with ``group``, a subcommand group) option."""
    return {"name": name, "type": 2 if group else 1, "options": list(options)}


@dataclass
class Reply:
    """One message the bot sent in answer to an interaction."""

    content: str
    ephemeral: bool
    kind: str
    allowed_mentions: dict[str, Any] | None = None


@dataclass
class RecordingAdapter(AsyncWebhookAdapter):
    """A webhook adapter that records what would be sent and answers like Discord."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    async def request(self, route: Any, session: Any, **kwargs: Any) -> Any:
        payload: dict[str, Any] = kwargs.get("payload") or {}
        self.requests.append((route.method, route.path))
        if route.path.endswith("/callback"):
            data = payload.get("data") or {}
            if payload.get("type") == 4:
                self._record(data, "response")
            ephemeral = bool(int(data.get("flags") or 0) & 64)
            return {
                "interaction": {
                    "id": str(route.webhook_id),
                    "type": 2,
                    "response_message_loading": payload.get("type") == 5,
                    "response_message_ephemeral": ephemeral,
                }
            }
        if route.method in ("POST", "PATCH") and route.path.startswith("/webhooks"):
            self._record(payload, "followup" if route.method == "POST" else "edit")
            return message_payload(payload.get("content") or "")
        return None

    def _record(self, data: dict[str, Any], kind: str) -> None:
        self.replies.append(
            Reply(
                content=data.get("content") or "",
                ephemeral=bool(int(data.get("flags") or 0) & 64),
                kind=kind,
                allowed_mentions=data.get("allowed_mentions"),
            )
        )


def message_payload(
    content: str,
    *,
    author: dict[str, Any] | None = None,
    channel_id: int = 1,
    message_id: int | None = None,
) -> dict[str, Any]:
    """A gateway MESSAGE_CREATE payload (the bot's own message unless ``author`` is given)."""
    return {
        "id": str(message_id if message_id is not None else _snowflake()),
        "channel_id": str(channel_id),
        "author": author or user_payload(APPLICATION_ID, "Bot", bot=True),
        "content": content,
        "timestamp": TIMESTAMP,
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
    }


class OfflineDiscord:
    """Feeds gateway payloads to a not logged-in bot and collects its interaction replies."""

    def __init__(self, bot: commands.Bot, *, bot_name: str = "Assistant") -> None:
        self.bot = bot
        self.adapter = RecordingAdapter()
        state = bot._connection
        state.user = discord.ClientUser(
            state=state,
            data=user_payload(APPLICATION_ID, bot_name, bot=True),  # type: ignore[arg-type]
        )

    def add_guild(self, payload: dict[str, Any]) -> discord.Guild:
        """Deliver a GUILD_CREATE and return the guild the bot now knows."""
        self.bot._connection.parse_guild_create(payload)
        guild = self.bot.get_guild(int(payload["id"]))
        if guild is None:
            raise RuntimeError("guild payload was not accepted")
        return guild

    def interaction_payload(
        self,
        command: str,
        *options: dict[str, Any],
        user: dict[str, Any],
        channel: dict[str, Any],
        permissions: int = 0,
        resolved_users: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for ``/command`` used by ``user`` in ``channel``."""
        data: dict[str, Any] = {
            "id": str(_snowflake()),
            "name": command,
            "type": 1,
            "options": list(options),
        }
        if resolved_users:
            data["resolved"] = {"users": {u["id"]: u for u in resolved_users}}
        payload: dict[str, Any] = {
            "id": str(_snowflake()),
            "application_id": str(APPLICATION_ID),
            "type": 2,
            "token": f"token-{_snowflake()}",
            "version": 1,
            "data": data,
            "channel_id": channel["id"],
            "channel": channel,
            "locale": "en-US",
            "attachment_size_limit": 8 * 1024 * 1024,
            "app_permissions": "0",
            "entitlements": [],
        }
        if "guild_id" in channel:
            payload["guild_id"] = channel["guild_id"]
            payload["member"] = {
                "user": user,
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": str(permissions),
            }
            payload["context"] = 0
        else:
            payload["user"] = user
            payload["context"] = 1
        return payload

    async def deliver(self, payload: dict[str, Any]) -> list[Reply]:
        """Deliver an INTERACTION_CREATE and wait for the command to finish; returns its replies."""
        start = len(self.adapter.replies)
        token = async_context.set(self.adapter)
        try:
            before = asyncio.all_tasks()
            self.bot._connection.parse_interaction_create(payload)  # type: ignore[arg-type]
            invoked = [
                task
                for task in asyncio.all_tasks() - before
                if task.get_name() == "CommandTree-invoker"
            ]
        finally:
            async_context.reset(token)
        await asyncio.gather(*invoked)
        return self.adapter.replies[start:]

    async def command(
        self,
        command: str,
        *options: dict[str, Any],
        user: dict[str, Any],
        channel: dict[str, Any],
        permissions: int = 0,
        resolved_users: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> list[Reply]:
        """Use ``/command`` as ``user`` in ``channel`` and return the bot's replies."""
        payload = self.interaction_payload(
            command,
            *options,
            user=user,
            channel=channel,
            permissions=permissions,
            resolved_users=resolved_users,
        )
        return await self.deliver(payload)


def dm_channel_payload(channel_id: int, user: dict[str, Any]) -> dict[str, Any]:
    """A DM channel with ``user``."""
    return {"id": str(channel_id), "type": 1, "recipients": [user]}
