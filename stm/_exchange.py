"""The ``GenerationFinished`` of one exchange, built from the turn's context (pure).

A host answers a person and then tells the memory what was said; every field of the two
messages but the reply's text and id is already in the ``TurnContext``, so this builds
them from it: the user's message (its text, author, name and Discord id) and the bot's
reply, said by the bot, whole or in the parts it was sent in.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._inputs import DialogueMessage, GenerationFinished, TurnContext

__all__ = ["ReplyPart", "exchange"]

# One message the reply was sent as: its text and its Discord message id (None: unknown).
ReplyPart = tuple[str, int | None]


def _parts(reply: str | Sequence[ReplyPart], reply_id: int | None) -> list[ReplyPart]:
    if isinstance(reply, str):
        return [(reply, reply_id)]
    if reply_id is not None:
        raise ValueError("reply_id goes with a reply given as one text; parts carry their ids")
    if isinstance(reply, bytes | dict) or not isinstance(reply, Sequence):
        raise ValueError(
            "reply must be a string or a list of (text, message_id) pairs, "
            f"not {type(reply).__name__}"
        )
    parts: list[ReplyPart] = []
    for part in reply:
        if not isinstance(part, tuple) or len(part) != 2:
            raise ValueError(f"each part of a reply is a (text, message_id) pair, not {part!r:.60}")
        parts.append(part)
    return parts


def exchange(
    context: TurnContext,
    reply: str | Sequence[ReplyPart],
    *,
    user_text: str | None = None,
    reply_id: int | None = None,
    user_name: str | None = None,
    bot_name: str | None = None,
    stopped: bool = False,
) -> GenerationFinished:
    """The ``GenerationFinished`` of one exchange in ``context``.

    The user's message is ``user_text`` (by default ``context.user_text``), written by
    ``context.user_id`` as ``context.user_name``, with the id ``context.message_id``. The
    reply is said by ``context.bot_name``: one text whose Discord message is ``reply_id``,
    or the parts it was sent in, each a ``(text, message_id)`` pair. ``user_name`` and
    ``bot_name`` override the context's names. Every value is checked as
    ``DialogueMessage`` checks it (``ValueError``).
    """
    if not isinstance(context, TurnContext):
        raise ValueError(f"context must be a TurnContext, not {type(context).__name__}")
    said = context.user_text if user_text is None else user_text
    messages = [
        DialogueMessage(
            role="user",
            content=said,
            author_id=context.user_id,
            speaker_name=context.user_name if user_name is None else user_name,
            message_id=context.message_id,
        )
    ]
    bot = context.bot_name if bot_name is None else bot_name
    messages.extend(
        DialogueMessage(role="assistant", content=text, speaker_name=bot, message_id=message_id)
        for text, message_id in _parts(reply, reply_id)
    )
    return GenerationFinished(context=context, messages=messages, stopped=stopped)
