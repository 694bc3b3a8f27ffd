"""Answering interactions within Discord's limits, with mentions that never ping."""

from __future__ import annotations

from typing import Any

import discord

from .formatting import MESSAGE_LIMIT, chunk_text

__all__ = ["NO_PINGS", "reply"]

NO_PINGS = discord.AllowedMentions.none()


async def reply(
    interaction: discord.Interaction[Any], content: str, *, ephemeral: bool = True
) -> None:
    """Answer ``interaction``, split into messages Discord accepts, whatever was sent before."""
    for chunk in chunk_text(content, MESSAGE_LIMIT):
        if interaction.response.is_done():
            await interaction.followup.send(chunk, ephemeral=ephemeral, allowed_mentions=NO_PINGS)
        else:
            await interaction.response.send_message(
                chunk, ephemeral=ephemeral, allowed_mentions=NO_PINGS
            )
