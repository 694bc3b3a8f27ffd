"""Gateway payloads as Discord sends them: users, members, channels, guilds, messages, options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import discord

__all__ = [
    "APPLICATION_ID",
    "SEND_MESSAGES",
    "TIMESTAMP",
    "VIEW_CHANNEL",
    "channel_payload",
    "dm_channel_payload",
    "guild_payload",
    "member_payload",
    "message_payload",
    "option",
    "snowflake",
    "subcommand",
    "user_payload",
]

APPLICATION_ID = 900_000_000_000_000_001
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
TIMESTAMP = "2025-01-01T00:00:00+00:00"
_last_id = 0


def snowflake() -> int:
    """A fresh id, unique in this process, whose time (``created_at``) is now."""
    global _last_id
    _last_id = max(discord.utils.time_snowflake(discord.utils.utcnow()), _last_id + 1)
    return _last_id


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


def member_payload(user: dict[str, Any], *, nick: str | None = None) -> dict[str, Any]:
    """A guild member object for ``user``."""
    return {
        "user": user,
        "nick": nick,
        "roles": [],
        "joined_at": TIMESTAMP,
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


def channel_payload(
    channel_id: int,
    name: str,
    guild_id: int,
    *,
    private: bool = False,
    kind: int = 0,
    parent_id: int | None = None,
    overwrites: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A guild channel of any ``kind`` (0 text, 2 voice, 4 category, 11/12 threads, 13
    stage, 15 forum) with its permission ``overwrites``; ``private`` adds one denying View
    Channel to @everyone."""
    data: dict[str, Any] = {
        "id": str(channel_id),
        "type": kind,
        "name": name,
        "guild_id": str(guild_id),
        "position": 0,
        "nsfw": False,
        "permission_overwrites": list(overwrites),
        "parent_id": str(parent_id) if parent_id else None,
    }
    if private:
        data["permission_overwrites"].insert(
            0, {"id": str(guild_id), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
        )
    if kind in (2, 13):  # voice, stage
        data |= {"bitrate": 64000, "user_limit": 0, "rtc_region": None}
    if kind == 15:  # forum
        data |= {"available_tags": [], "flags": 0}
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


def dm_channel_payload(channel_id: int, user: dict[str, Any]) -> dict[str, Any]:
    """A DM channel with ``user``."""
    return {"id": str(channel_id), "type": 1, "recipients": [user]}


def guild_payload(
    guild_id: int,
    name: str,
    channels: list[dict[str, Any]],
    *,
    owner_id: int = 1,
    members: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """A GUILD_CREATE payload: @everyone may view channels and send messages."""
    everyone = VIEW_CHANNEL | SEND_MESSAGES | (1 << 31)
    return {
        "id": str(guild_id),
        "name": name,
        "owner_id": str(owner_id),
        "unavailable": False,
        "member_count": max(2, len(members)),
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
        "members": list(members),
        "emojis": [],
        "stickers": [],
        "features": [],
        "preferred_locale": "en-US",
    }


def message_payload(
    content: str,
    *,
    author: dict[str, Any] | None = None,
    channel_id: int = 1,
    message_id: int | None = None,
    mentions: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """A gateway MESSAGE_CREATE payload (the bot's own message unless ``author`` is given)."""
    return {
        "id": str(message_id if message_id is not None else snowflake()),
        "channel_id": str(channel_id),
        "author": author or user_payload(APPLICATION_ID, "Bot", bot=True),
        "content": content,
        "timestamp": TIMESTAMP,
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": list(mentions),
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
    }


def option(name: str, value: Any, kind: int) -> dict[str, Any]:
    """A command option: kind 3 string, 4 integer, 5 boolean, 6 user."""
    return {"name": name, "type": kind, "value": value}


def subcommand(name: str, *options: dict[str, Any], group: bool = False) -> dict[str, Any]:
    """A subcommand (or, with ``group``, a subcommand group) option."""
    return {"name": name, "type": 2 if group else 1, "options": list(options)}
