"""The sample bot's chat: answers when mentioned or in a DM, with the short-term memory in view.

A real bot calls its LLM in ``think``; this one answers with what it was shown, so the
example runs without a model.
"""

from __future__ import annotations

from typing import Any

import discord
from discord.ext import commands
from discord_stm.short_term_memory import COG_NAME, record_turn, turn_context_from_message

from stm import ShortTermMemory, ToolRegistry, TurnContext, place


def think(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Where your model goes: ``messages`` in chat-completions form, ``tools`` to offer it."""
    notes = sum(1 for m in messages if m["role"] == "system") - 1
    said = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return f"You said: {said} ({notes} memory note(s), {len(tools)} tool(s))"


class Chat(commands.Cog):
    """Answers people, with short-term memory."""

    def __init__(self, bot: commands.Bot, tools: ToolRegistry) -> None:
        self.bot = bot
        self.tools = tools

    @property
    def memory(self) -> ShortTermMemory:
        cog = self.bot.get_cog(COG_NAME)
        if cog is None:
            raise RuntimeError("the short-term memory cog is not loaded")
        return cog.memory  # type: ignore[attr-defined, no-any-return]

    async def answer(self, ctx: TurnContext, text: str) -> str:
        """One turn's answer: the memory context into the prompt, then the model."""
        context = await self.memory.build_context(ctx)
        conversation: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a friendly bot on Discord."},
            {"role": "user", "content": text},
        ]
        # stm.place puts each block `depth` messages from the end (-1: right after the
        # system prompt) and the nudge, which asks the model to update its notes.
        messages = place(conversation, context)
        # A real model may answer with tool calls; run each with
        # await self.tools.execute(call.name, ctx, call.arguments) and give it the result.
        return think(messages, self.tools.definitions(ctx))

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        me = self.bot.user
        if message.author.bot or me is None:
            return
        if message.guild is not None and me not in message.mentions:
            return
        text = message.content.replace(f"<@{me.id}>", "").strip()
        ctx = turn_context_from_message(message, user_text=text)
        reply = await self.answer(ctx, text)
        sent = await message.reply(reply, allowed_mentions=discord.AllowedMentions.none())
        # Once the reply is out, the memory records the exchange: both messages with their
        # Discord ids (so deletes and edits reach it) and who said them.
        record_turn(self.bot, ctx, sent)


async def setup(bot: commands.Bot) -> None:
    await bot.add_cog(Chat(bot, bot.tools))  # type: ignore[attr-defined]
