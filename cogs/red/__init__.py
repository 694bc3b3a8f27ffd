"""The short-term memory as a Red-DiscordBot cog (installed as ``discord_stm.red``).

Red loads cogs from its cog paths, not from installed packages: add the folder that
``python -m discord_stm.red`` prints with ``[p]addpath``, then ``[p]load shorttermmemory``.
Needs Red 3.5 (``pip install 'discord-stm[red]'`` resolves both together).
"""

from __future__ import annotations

from typing import Any

from ..short_term_memory._cog import COG_NAME
from ._cog import END_USER_DATA_STATEMENT, RedShortTermMemory, red_config

__all__ = ["RedShortTermMemory", "__red_end_user_data_statement__", "setup", "teardown"]

__red_end_user_data_statement__ = END_USER_DATA_STATEMENT


async def setup(bot: Any) -> None:
    """Add the cog; its memory opens in ``cog_load`` (``[p]load`` runs this)."""
    tools = getattr(bot, "tools", None)
    await bot.add_cog(RedShortTermMemory(bot, red_config(), tools=tools))


async def teardown(bot: Any) -> None:
    """Remove the cog (draining the memory) on ``[p]unload``.

    The cog's class lives in ``discord_stm.red``, not in the module Red loaded, so Red
    would not find it to remove by itself.
    """
    await bot.remove_cog(COG_NAME)
