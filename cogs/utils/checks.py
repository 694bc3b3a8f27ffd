"""Local permission checks for slash commands that also admit the bot's owner.

A command's default permission is only a hint that server admins can
override in Server Settings; these checks enforce the rule in the bot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import discord
from discord import app_commands

__all__ = [
    "MissingServerPermission",
    "NotOwner",
    "has_server_permission_or_owner",
    "is_owner",
    "server_only",
]

T = TypeVar("T")


class MissingServerPermission(app_commands.CheckFailure):
    """The user lacks the server permission the command needs (and is not the owner)."""

    def __init__(self, permission: str) -> None:
        self.permission = permission
        human = permission.replace("_", " ").replace("guild", "server").title()
        super().__init__(f"You need the **{human}** permission to use this command.")


class NotOwner(app_commands.CheckFailure):
    """Only the bot's owner may do this."""

    def __init__(self, what: str = "this") -> None:
        self.what = what
        super().__init__(f"Only the bot's owner may do {what}.")


async def _is_owner(interaction: discord.Interaction[Any]) -> bool:
    client = interaction.client
    is_owner = getattr(client, "is_owner", None)
    if is_owner is None:
        return False
    return bool(await is_owner(interaction.user))


def has_server_permission_or_owner(permission: str) -> Callable[[T], T]:
    """Passes for members holding ``permission`` in the server, and for the bot's owner."""
    if permission not in discord.Permissions.VALID_FLAGS:
        raise ValueError(f"unknown permission {permission!r}")

    async def predicate(interaction: discord.Interaction[Any]) -> bool:
        if getattr(interaction.permissions, permission) or interaction.permissions.administrator:
            return True
        if await _is_owner(interaction):
            return True
        raise MissingServerPermission(permission)

    return app_commands.check(predicate)


async def is_owner(interaction: discord.Interaction[Any]) -> bool:
    """True when the interaction's user owns the bot."""
    return await _is_owner(interaction)


def server_only() -> Callable[[T], T]:
    """Refuses use in DMs locally too: ``guild_only`` is only metadata for Discord's client.

    Checks run bottom-up, so place it below the other checks to run it first.
    """

    def predicate(interaction: discord.Interaction[Any]) -> bool:
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage("This command can only be used in a server.")
        return True

    return app_commands.check(predicate)
