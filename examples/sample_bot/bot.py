"""A bot of your own with discord-stm's short-term memory: run ``python bot.py``.

The bot keeps its own extensions in its own ``cogs/`` package; the memory comes from
the installed ``discord-stm`` package (``pip install discord-stm``), whose extension is
``discord_stm.short_term_memory``. Set DISCORD_TOKEN (and STM_DATABASE to choose the file).
"""

from __future__ import annotations

import asyncio
import logging
import os

import discord
from discord.ext import commands
from discord_stm.short_term_memory import ShortTermMemoryCog

from stm import STMConfig, ToolRegistry


class SampleBot(commands.Bot):
    """A chat bot whose answers see the short-term memory of the conversation."""

    def __init__(self, config: STMConfig) -> None:
        intents = discord.Intents.default()
        intents.message_content = True  # also enable it in the Developer Portal
        super().__init__(command_prefix=commands.when_mentioned, intents=intents)
        self.stm_config = config
        # The model's tools; the memory cog adds update_short_term_memory while loaded.
        self.tools = ToolRegistry()

    async def setup_hook(self) -> None:
        # The bot's own extension, from its own cogs/ package.
        await self.load_extension("cogs.chat")
        # The memory, with its resources passed in. The bot's chat cog reaches it with
        # bot.get_cog(COG_NAME).memory.
        await self.add_cog(ShortTermMemoryCog(self, self.stm_config, tools=self.tools))
        # Once, or when the commands change: await self.tree.sync()


async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    config = STMConfig(database=os.environ.get("STM_DATABASE", "data/stm.sqlite3"))
    async with SampleBot(config) as bot:
        await bot.start(os.environ["DISCORD_TOKEN"])


if __name__ == "__main__":
    asyncio.run(main())
