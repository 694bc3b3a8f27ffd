"""The short-term memory extension: ``await bot.load_extension(EXTENSION)`` adds the cog.

Installed from the wheel it is ``discord_stm.short_term_memory``; in the repository,
``cogs.short_term_memory``. A bot that passes its resources explicitly adds the cog itself:
``await bot.add_cog(ShortTermMemoryCog(bot, config=..., tools=...))``.
"""

from __future__ import annotations

from discord.ext import commands

from stm import STMConfig, ToolRegistry

from .._utils.context import turn_context_from_interaction, turn_context_from_message
from .._utils.formatting import chunk_text
from .._utils.turns import record_turn
from ._cog import COG_NAME, COMMANDS, EXTENSION, CommandNameTaken, ShortTermMemoryCog
from ._i18n import CommandTranslator

__all__ = [
    "COG_NAME",
    "COMMANDS",
    "EXTENSION",
    "CommandNameTaken",
    "CommandTranslator",
    "ShortTermMemoryCog",
    "chunk_text",
    "record_turn",
    "setup",
    "turn_context_from_interaction",
    "turn_context_from_message",
]


async def setup(bot: commands.Bot) -> None:
    """Add ``ShortTermMemoryCog`` with what the bot offers; its memory opens in ``cog_load``.

    Uses ``bot.stm_config`` (an ``STMConfig``) and ``bot.tools`` (a ``ToolRegistry``)
    when the bot has them; the cog logs one line saying what it chose.
    """
    config = getattr(bot, "stm_config", None)
    tools = getattr(bot, "tools", None)
    cog_config = config if isinstance(config, STMConfig) else None
    cog_tools = tools if isinstance(tools, ToolRegistry) else None
    cog = ShortTermMemoryCog(bot, cog_config, tools=cog_tools)
    if cog_config is not None:
        cog._config_source = "from bot.stm_config"
    elif config is not None:
        cog._misconfigured = True
        cog._config_source = (
            f"from the STM_* environment (bot.stm_config is a {type(config).__name__}, "
            "not an stm.STMConfig)"
        )
    if tools is not None and cog_tools is None:
        cog._misconfigured = True
        cog._load_note = (
            f"bot.tools is a {type(tools).__name__}, not an stm.ToolRegistry: it was left "
            f"alone and the model cannot call the memory's tool"
        )
    await bot.add_cog(cog)
