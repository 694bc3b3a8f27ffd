"""One chat turn end to end: memory context, prompt, tool loop, then ``generation_finished``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from discord.ext import commands

from cogs.short_term_memory import COG_NAME, EXTENSION
from stm import (
    GenerationFinished,
    PromptContext,
    ShortTermMemory,
    ToolRegistry,
    TurnContext,
    exchange,
)

from .models import ChatModel
from .prompt import Message, assemble
from .toolloop import MAX_TOOL_ITERATIONS, TurnOutcome, run_tool_loop

__all__ = ["ChatPipeline", "TurnRecord", "system_prompt"]


def system_prompt(bot_name: str) -> str:
    """The host's default system prompt."""
    return (
        f"You are {bot_name}, a friendly assistant chatting on Discord. Messages from users "
        "start with their name. Answer briefly and naturally."
    )


@dataclass
class TurnRecord:
    """What one turn used and produced, for the demo and the console to show."""

    context: PromptContext
    messages: list[Message]
    outcome: TurnOutcome
    event: GenerationFinished


class ChatPipeline:
    """Runs turns for a bot that has the short-term memory cog loaded."""

    def __init__(
        self,
        bot: commands.Bot,
        model: ChatModel,
        tools: ToolRegistry,
        *,
        max_tool_iterations: int = MAX_TOOL_ITERATIONS,
    ) -> None:
        self.bot = bot
        self.model = model
        self.tools = tools
        self.max_tool_iterations = max_tool_iterations

    @property
    def memory(self) -> ShortTermMemory:
        """The memory of the loaded cog."""
        cog = self.bot.get_cog(COG_NAME)
        memory = getattr(cog, "memory", None)
        if not isinstance(memory, ShortTermMemory):
            raise RuntimeError(f"load the {EXTENSION} extension first")
        return memory

    async def answer(
        self, ctx: TurnContext, text: str, *, history: Sequence[Message] = ()
    ) -> TurnRecord:
        """Answer ``text`` from ``ctx``'s user; call ``finished`` once the reply is out."""
        memory = self.memory
        ctx.user_text = text
        # The intent gate: an explicit "remember this" is long-term memory's job, so the
        # short-term tool and nudge are withheld for the turn.
        ctx.explicit_memory_intent = ctx.explicit_memory_intent or memory.intent_gate.matches(text)
        context = await memory.build_context(ctx)
        said = f"{ctx.user_name}: {text}" if ctx.user_name else text
        conversation = [*history, {"role": "user", "content": said}]
        messages = assemble(system_prompt(ctx.bot_name), conversation, context)
        outcome = await run_tool_loop(
            self.model, messages, self.tools, ctx, max_iterations=self.max_tool_iterations
        )
        event = exchange(ctx, outcome.reply, user_text=text)
        return TurnRecord(context, messages, outcome, event)

    def finished(self, record: TurnRecord) -> None:
        """Tell the cog (and any other listener) that the turn's reply was delivered."""
        self.bot.dispatch("generation_finished", record.event)

    async def run_turn(
        self, ctx: TurnContext, text: str, *, history: Sequence[Message] = ()
    ) -> TurnRecord:
        """Answer and dispatch at once, for hosts whose delivery cannot fail (demo, console)."""
        record = await self.answer(ctx, text, history=history)
        self.finished(record)
        return record
