"""The bundled bot's prompt: its system prompt, the conversation and the memory in place."""

from __future__ import annotations

from typing import Any

from stm import PromptContext, place

__all__ = ["Message", "assemble"]

Message = dict[str, Any]


def assemble(
    system_prompt: str, conversation: list[Message], context: PromptContext
) -> list[Message]:
    """The messages to send: the system prompt, then the conversation with the memory placed
    by ``stm.place`` (depth -1 right after the system prompt, depth d before the last d)."""
    return place([{"role": "system", "content": system_prompt}, *conversation], context)
