"""The Discord chat bot of ``python bot.py``: replies when mentioned or in DMs."""

from __future__ import annotations

import logging

import discord
from discord.ext import commands

from cogs.short_term_memory import (
    ShortTermMemoryCog,
    chunk_text,
    record_turn,
    turn_context_from_message,
)
from stm import STMConfig, ToolRegistry

from .models import ChatModel
from .pipeline import ChatPipeline
from .prompt import Message

__all__ = ["ChatBot", "run_bot"]

NO_PINGS = discord.AllowedMentions.none()

log = logging.getLogger("host.bot")

HISTORY_MESSAGES = 12
APOLOGY = "Sorry, I could not come up with an answer just now."


class ChatBot(commands.Bot):
    """An LLM chat bot with short-term memory."""

    def __init__(self, model: ChatModel, *, stm_config: STMConfig, sync: bool = False) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            allowed_mentions=NO_PINGS,
            help_command=None,
        )
        self.stm_config = stm_config
        self.tools = ToolRegistry()
        self.model = model
        self.sync_commands = sync
        self.pipeline = ChatPipeline(self, model, self.tools)

    async def setup_hook(self) -> None:
        # Resources go into the cog explicitly, as discord.py's advanced start-up example
        # does; load_extension(EXTENSION) would find them on the bot instead.
        await self.add_cog(ShortTermMemoryCog(self, self.stm_config, tools=self.tools))
        if self.sync_commands:
            # Syncing is rate limited by Discord, so it happens only when asked for.
            synced = await self.tree.sync()
            log.info("synced %d slash commands", len(synced))

    async def close(self) -> None:
        # Unloading the extension (inside close) drains the memory's pending writes.
        await super().close()
        await self.model.close()

    async def history(self, message: discord.Message) -> list[Message]:
        """The channel's recent messages before ``message``, oldest first, as chat messages."""
        found: list[Message] = []
        try:
            async for earlier in message.channel.history(limit=HISTORY_MESSAGES, before=message):
                if self.user is not None and earlier.author.id == self.user.id:
                    found.append({"role": "assistant", "content": earlier.clean_content})
                elif earlier.clean_content:
                    said = f"{earlier.author.display_name}: {earlier.clean_content}"
                    found.append({"role": "user", "content": said})
        except discord.HTTPException as exc:
            log.warning("could not read the history of channel %s: %s", message.channel.id, exc)
        return found[::-1]

    def addressed(self, message: discord.Message) -> str | None:
        """The text addressed to the bot, or None when the message is not for it."""
        if message.author.bot or self.user is None:
            return None
        if message.guild is not None and self.user not in message.mentions:
            return None
        text = message.content
        for form in (f"<@{self.user.id}>", f"<@!{self.user.id}>"):
            text = text.replace(form, "")
        return text.strip() or None

    async def on_message(self, message: discord.Message) -> None:
        text = self.addressed(message)
        if text is None:
            return
        ctx = turn_context_from_message(message, user_text=text)
        history = await self.history(message)
        try:
            async with message.channel.typing():
                record = await self.pipeline.answer(ctx, text, history=history)
        except Exception:
            log.exception("generation failed in channel %s", message.channel.id)
            await message.channel.send(APOLOGY, allowed_mentions=NO_PINGS)
            return
        # Each part of the reply as Discord holds it, with its id, so that deleting or
        # editing any part reaches the memory.
        sent: list[discord.Message] = []
        try:
            for index, chunk in enumerate(chunk_text(record.outcome.reply)):
                if index == 0:
                    part = await message.reply(
                        chunk, allowed_mentions=NO_PINGS, mention_author=False
                    )
                else:
                    part = await message.channel.send(chunk, allowed_mentions=NO_PINGS)
                sent.append(part)
        except discord.HTTPException:
            log.exception("could not send the reply in channel %s", message.channel.id)
            sent = []  # a reply cut short is not remembered
        record.event = record_turn(self, ctx, sent, user_text=text)


async def run_bot(token: str, model: ChatModel, config: STMConfig, *, sync: bool) -> int:
    """Run until the connection ends or this is cancelled; the bot closes cleanly either way.

    ``bot.py`` runs it under ``host.shutdown.run_until_signalled``, which turns
    SIGTERM and Ctrl-C into that cancellation.
    """
    bot = ChatBot(model, stm_config=config, sync=sync)
    # Leaving the block closes the bot (the memory drained, the model closed) also on
    # cancellation.
    async with bot:
        await bot.start(token)
    return 0
