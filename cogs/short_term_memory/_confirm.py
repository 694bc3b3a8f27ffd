"""Confirm / Cancel under a purge's (or a restore's) preview: nothing is done until the
asker confirms, and only while they still may."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import discord
from discord import app_commands

from .._utils.checks import Check, still_allowed
from .._utils.replies import NO_PINGS
from ._describe import (
    ENGLISH,
    Confirmed,
    describe_acting,
    describe_cancelled,
    describe_expired,
    describe_purge_answered,
    describe_purge_not_yours,
    describe_refusal,
    purge_buttons,
)
from ._i18n import Texts, texts_for

__all__ = ["CONFIRM_SECONDS", "Confirmation"]

log = logging.getLogger("discord_stm")

# Long enough to read the preview, well inside the 15 minutes an interaction's token
# lets the bot edit its answer (the expiry is said in that answer).
CONFIRM_SECONDS = 120.0


class Confirmation(discord.ui.View):
    """The buttons under a purge's (or a restore's) preview; only ``asker`` may press them, once.

    ``act`` runs the purge (or restore: ``kind``, which says what the message says while
    it runs, and that nothing was done when cancelled or unanswered) and returns what the
    message then says. ``admits``: the
    checks that admitted the command (``checks.who_may``, and any the command made of
    its options); Confirm runs them again against the press, whose payload carries the
    presser's permissions as they are now, and a check that refuses ends the
    confirmation with the refusal the command would have given, nothing done.
    Cancelled, or unanswered after ``timeout`` seconds, nothing happens and the message
    says so. Send it, then set ``message`` (the sent message) so the expiry can be
    written.
    """

    def __init__(
        self,
        asker: int,
        act: Callable[[], Awaitable[str]],
        *,
        admits: Sequence[Check],
        apology: str,
        kind: Confirmed = "purge",
        timeout: float = CONFIRM_SECONDS,
        texts: Texts = ENGLISH,
    ) -> None:
        super().__init__(timeout=timeout)
        self.texts = texts
        self.kind = kind
        self.asker = asker
        self.message: discord.WebhookMessage | None = None
        self.answered = False
        self._act = act
        self._admits = tuple(admits)
        self._apology = apology
        self._seconds = timeout
        self.confirm.label, self.cancel.label = purge_buttons(texts)

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        # A press whose payload does not say who pressed (a server's without its member:
        # they left) cannot be the asker's.
        if not interaction.user or interaction.user.id != self.asker:
            await _tell(interaction, describe_purge_not_yours(texts_for(interaction.locale)))
            return False
        if self.answered:
            await _tell(interaction, describe_purge_answered(texts_for(interaction.locale)))
            return False
        # Set before any await: a second press dispatched meanwhile sees it.
        self.answered = True
        return True

    @discord.ui.button(style=discord.ButtonStyle.danger)
    async def confirm(
        self, interaction: discord.Interaction[Any], _button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        try:
            # Permissions can change in the minutes the buttons wait (a role taken away,
            # the server handed over): the press must be allowed itself.
            await still_allowed(interaction, self._admits)
        except app_commands.CheckFailure as refused:
            text = describe_refusal(refused, texts_for(interaction.locale))
            await interaction.response.edit_message(
                content=text, view=None, allowed_mentions=NO_PINGS
            )
            return
        await interaction.response.edit_message(
            content=describe_acting(self.kind, self.texts), view=None, allowed_mentions=NO_PINGS
        )
        text = await self._act()
        await interaction.edit_original_response(content=text, allowed_mentions=NO_PINGS)

    @discord.ui.button(style=discord.ButtonStyle.secondary)
    async def cancel(
        self, interaction: discord.Interaction[Any], _button: discord.ui.Button[Any]
    ) -> None:
        self.stop()
        await interaction.response.edit_message(
            content=describe_cancelled(self.kind, self.texts), view=None, allowed_mentions=NO_PINGS
        )

    async def on_timeout(self) -> None:
        if self.answered or self.message is None:
            return
        self.answered = True
        try:
            await self.message.edit(
                content=describe_expired(self.kind, self._seconds, self.texts),
                view=None,
                allowed_mentions=NO_PINGS,
            )
        except discord.HTTPException:
            log.warning("could not mark a %s confirmation as expired", self.kind, exc_info=True)

    async def on_error(
        self, interaction: discord.Interaction[Any], error: Exception, item: Any, /
    ) -> None:
        log.error(
            "%s confirmation failed (user %s, server %s)",
            self.kind,
            interaction.user.id,
            interaction.guild_id or "none (DM)",
            exc_info=error,
        )
        try:
            if interaction.response.is_done():
                await interaction.edit_original_response(
                    content=self._apology, view=None, allowed_mentions=NO_PINGS
                )
            else:
                await interaction.response.edit_message(
                    content=self._apology, view=None, allowed_mentions=NO_PINGS
                )
        except discord.HTTPException:
            log.exception("could not answer a failed %s confirmation", self.kind)


async def _tell(interaction: discord.Interaction[Any], text: str) -> None:
    await interaction.response.send_message(text, ephemeral=True, allowed_mentions=NO_PINGS)
