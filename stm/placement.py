"""Placing a ``PromptContext`` into an OpenAI-style list of chat messages (pure).

The rule, stated once: the conversation is every message after the leading
system prompt(s) (the messages at the start whose role is ``system`` or
``developer``). A depth counts conversation messages back from its end: depth
0 goes after the last message, depth 2 before the last two, and a depth
larger than the conversation goes at its start. Depth -1 is the top: right
after the system prompt(s), or first when there is none. Depths count the
caller's messages only, never other inserted text, and texts placed at the
same spot keep their order: the blocks as listed, then the nudge. A text
never separates tool results (role ``tool``) from the assistant message that
called the tools: it moves up to just before that message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .models import PromptContext

__all__ = ["SYSTEM_ROLES", "TOP", "place"]

# The top of the conversation, right after the system prompt(s).
TOP = -1
# Roles a leading system prompt is sent with: OpenAI's newer models name it "developer".
SYSTEM_ROLES = frozenset({"system", "developer"})


def _check_depth(depth: object, what: str) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < TOP:
        raise ValueError(f"{what} must be an integer >= -1, not {depth!r}")
    return depth


def _spot(messages: list[dict[str, Any]], top: int, size: int, depth: int) -> int:
    index = top + (0 if depth == TOP else max(0, size - depth))
    # APIs refuse a request whose tool results do not follow their call directly.
    while top < index < len(messages) and messages[index].get("role") == "tool":
        index -= 1
    return index


def place(
    messages: Sequence[Mapping[str, Any]], context: PromptContext, *, role: str = "system"
) -> list[dict[str, Any]]:
    """``messages`` with ``context``'s blocks and nudge inserted at their depths.

    Each text is inserted as ``{"role": role, "content": text}`` (see the module for
    the rule). ``messages`` is not changed; the list returned holds copies of its dicts.
    """
    if not isinstance(context, PromptContext):
        raise TypeError(f"context must be an stm.PromptContext, not {type(context).__name__}")
    if not isinstance(role, str) or not role:
        raise ValueError("role must be a non-empty string")
    placed = [dict(message) for message in messages]
    top = 0
    while top < len(placed) and placed[top].get("role") in SYSTEM_ROLES:
        top += 1
    size = len(placed) - top
    texts = [(block.text, _check_depth(block.depth, "a block's depth")) for block in context.blocks]
    if context.nudge:
        texts.append((context.nudge, _check_depth(context.nudge_depth, "nudge_depth")))
    # Where each text goes, as a position among the original messages: inserting from
    # the back keeps the positions still to use valid, and the reversed walk over a
    # stable sort keeps texts of one position in their given order.
    spots = [(_spot(placed, top, size, depth), text) for text, depth in texts]
    spots.sort(key=lambda spot: spot[0])
    for index, text in reversed(spots):
        placed.insert(index, {"role": role, "content": text})
    return placed
