"""Recording a turn once its reply is out: the one call a host makes after answering."""

from __future__ import annotations

from collections.abc import Sequence

import discord
from discord.ext import commands

from stm import GenerationFinished, TurnContext, exchange

__all__ = ["GENERATION_FINISHED", "record_turn"]

# The event the cog listens for: ``bot.dispatch(GENERATION_FINISHED, event)``.
GENERATION_FINISHED = "generation_finished"


def record_turn(
    bot: commands.Bot,
    ctx: TurnContext,
    sent: discord.Message | Sequence[discord.Message],
    *,
    user_text: str | None = None,
    reply: str | None = None,
) -> GenerationFinished:
    """Tell the memory (and any other listener) what was said in the turn ``ctx``.

    ``sent`` is the reply as Discord holds it: the message ``message.reply(...)``
    returned, or every message a long reply was split into. The user's message is
    ``ctx.user_text`` (or ``user_text``), with its id ``ctx.message_id``, said by
    ``ctx.user_name``; the reply is each sent message's text with its id, said by
    ``ctx.bot_name``, so that a delete or an edit on Discord reaches the memory. ``reply``
    records the reply's text as the model wrote it instead, carried by the first sent
    message's id. With nothing sent the turn is recorded as stopped and nothing is
    remembered. Dispatches ``generation_finished`` with the ``GenerationFinished`` it
    returns; the cog's listener captures it.
    """
    messages = [sent] if isinstance(sent, discord.Message) else list(sent)
    for message in messages:
        if not isinstance(message, discord.Message):
            raise TypeError(f"sent must hold discord.Message objects, not {type(message).__name__}")
    if reply is not None:
        first = messages[0].id if messages else None
        event = exchange(ctx, reply, user_text=user_text, reply_id=first, stopped=not messages)
    else:
        parts = [(message.content, message.id) for message in messages]
        event = exchange(ctx, parts, user_text=user_text, stopped=not messages)
    bot.dispatch(GENERATION_FINISHED, event)
    return event
