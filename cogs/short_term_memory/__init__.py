"""The ``cogs.short_term_memory`` extension: ``await bot.load_extension(...)`` adds the cog."""

from __future__ import annotations

from discord.ext import commands

from .cog import ShortTermMemoryCog

__all__ = ["ShortTermMemoryCog", "setup"]


async def setup(bot: commands.Bot) -> None:
    """Add ``ShortTermMemoryCog``; its memory opens in ``cog_load``."""
    await bot.add_cog(ShortTermMemoryCog(bot))
