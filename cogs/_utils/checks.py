"""Local permission checks for slash commands that also admit the bot's owner.

A command's default permission is only a hint that server admins can
override in Server Settings; these checks enforce the rule in the bot. They say
who may use a command, so they hold at every moment it acts: a confirmation
pressed later runs them again (``who_may``, ``still_allowed``) against the press,
whose payload carries the presser's permissions as they are then.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import discord
from discord import app_commands

__all__ = [
    "Check",
    "MissingServerPermission",
    "NotOwner",
    "has_server_permission_or_owner",
    "is_owner",
    "owner_only",
    "server_only",
    "still_allowed",
    "who_may",
]

T = TypeVar("T")
Check = Callable[[discord.Interaction[Any]], Awaitable[bool] | bool]
"""A predicate over an interaction: True, or False / a ``CheckFailure`` to refuse."""

# Marks the predicates of this module: they say who may use a command (not how often,
# as a cooldown does), so they are what a later confirmation runs again.
_WHO_MAY = "__stm_who_may__"


def _who_may(predicate: T) -> T:
    setattr(predicate, _WHO_MAY, True)
    return predicate


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
    # A payload that does not say who acted (a server's without its member) is no one's.
    if is_owner is None or not interaction.user:
        return False
    return bool(await is_owner(interaction.user))


def server_permission_or_owner(
    permission: str,
) -> Callable[[discord.Interaction[Any]], Coroutine[Any, Any, bool]]:
    """A check (to run, or to pass on to a confirmation) that passes for members holding
    ``permission`` in the server and for the bot's owner, and otherwise raises
    ``MissingServerPermission``: for an option that needs more than the command."""
    if permission not in discord.Permissions.VALID_FLAGS:
        raise ValueError(f"unknown permission {permission!r}")

    async def predicate(interaction: discord.Interaction[Any]) -> bool:
        # The interaction's own permissions: what Discord computed for this very use
        # (roles, channel overwrites, server ownership), not a member cached earlier.
        if getattr(interaction.permissions, permission) or interaction.permissions.administrator:
            return True
        if await _is_owner(interaction):
            return True
        raise MissingServerPermission(permission)

    return predicate


def has_server_permission_or_owner(permission: str) -> Callable[[T], T]:
    """Passes for members holding ``permission`` in the server, and for the bot's owner."""
    return app_commands.check(_who_may(server_permission_or_owner(permission)))


async def is_owner(interaction: discord.Interaction[Any]) -> bool:
    """True when the interaction's user owns the bot."""
    return await _is_owner(interaction)


def owner_only(what: str = "this") -> Check:
    """A check (to run, or to pass on to a confirmation) that passes for the bot's owner
    and otherwise raises ``NotOwner(what)``: for an option only the owner may use."""

    async def predicate(interaction: discord.Interaction[Any]) -> bool:
        if await _is_owner(interaction):
            return True
        raise NotOwner(what)

    return _who_may(predicate)


def who_may(command: Any) -> tuple[Check, ...]:
    """The checks of an app ``command`` (None: none) that say who may use it, in the order
    discord.py runs them: what a confirmation of it runs again when pressed."""
    checks = getattr(command, "checks", None) or ()
    return tuple(check for check in checks if getattr(check, _WHO_MAY, False))


async def still_allowed(interaction: discord.Interaction[Any], checks: Sequence[Check]) -> None:
    """Run ``checks`` against ``interaction`` (a later one: a button pressed), as discord.py
    ran them for the command; raise the ``CheckFailure`` of the first that refuses."""
    for check in checks:
        if not await discord.utils.maybe_coroutine(check, interaction):
            raise app_commands.CheckFailure()


def server_only() -> Callable[[T], T]:
    """Refuses use in DMs locally too: ``guild_only`` is only metadata for Discord's client.

    Checks run bottom-up, so place it below the other checks to run it first.
    """

    def predicate(interaction: discord.Interaction[Any]) -> bool:
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage("This command can only be used in a server.")
        return True

    return app_commands.check(_who_may(predicate))
