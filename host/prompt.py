"""Placing the Short-Term Memory Context into a chat-completions message list."""

from __future__ import annotations

from typing import Any

from stm import PromptContext

__all__ = ["Message", "assemble"]

Message = dict[str, Any]


def assemble(
    system_prompt: str, conversation: list[Message], context: PromptContext
) -> list[Message]:
    """The messages to send: system prompt, then the conversation with memory at its depths.

    Depth -1 is right after the system prompt; depth d sits before the last d
    messages of the conversation, clamped so a short conversation still gets
    the block. Depths count real messages, not other inserted blocks.
    """
    size = len(conversation)
    inserts: list[tuple[int, str]] = []
    for block in context.blocks:
        inserts.append((0 if block.depth < 0 else max(0, size - block.depth), block.text))
    if context.nudge:
        depth = context.nudge_depth
        inserts.append((0 if depth < 0 else max(0, size - depth), context.nudge))
    placed: list[Message] = [{"role": "system", "content": system_prompt}]
    for index, message in enumerate([*conversation, None]):
        placed.extend({"role": "system", "content": t} for i, t in inserts if i == index)
        if message is not None:
            placed.append(message)
    return placed
