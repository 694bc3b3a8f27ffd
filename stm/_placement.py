"""Placing a ``PromptContext`` into a model API's request: OpenAI chat messages (the
default), OpenAI Responses input, Anthropic Messages and Gemini ``contents`` (pure).

The rule, stated once: the conversation is every message after the system prompt. For
OpenAI chat and Responses input the system prompt is the leading messages whose role is
``system`` or ``developer``; Anthropic and Gemini take it apart from the messages
(``system``, ``systemInstruction``). A depth counts conversation messages back from its
end: depth 0 goes after the last message, depth 2 before the last two, and a depth
larger than the conversation goes at its start. Depth -1 is the top: right after the
system prompt (for Anthropic and Gemini, appended to it), or first when there is none.
Depths count the caller's messages only, never other inserted text, and texts placed at
the same spot keep their order: the blocks as listed, then the nudge.

What each API refuses is never produced. A text never separates tool results from the
call they answer (OpenAI's ``tool`` messages, Responses' ``function_call_output`` and the
reasoning item a call follows): it moves up to just before the call. Anthropic and
Gemini take ``user`` and ``assistant``/``model`` turns: a text joins the user turn at its
spot as a text block or part (after the ``tool_result`` blocks Anthropic wants first; a
Gemini turn of function responses is passed over, up to before the call), or becomes a
user turn of its own where no user turn is next to the spot, so roles still alternate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, overload

from ._models import PromptContext

__all__ = ["PLACEMENT_APIS", "SYSTEM_ROLES", "TOP", "place"]

# The top of the conversation, right after the system prompt(s).
TOP = -1
# Roles a leading system prompt is sent with: OpenAI's newer models name it "developer".
SYSTEM_ROLES = frozenset({"system", "developer"})
# The request forms ``place`` writes: ``api=``.
PLACEMENT_APIS = ("openai", "responses", "anthropic", "gemini")
# Responses input items that must follow the item before them: a call's output follows
# the call, and a call follows the reasoning item (or the other calls) it came with.
_RESPONSES_TIED = frozenset(
    {
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "computer_call",
        "computer_call_output",
        "mcp_call",
        "mcp_approval_response",
    }
)

Message = dict[str, Any]
Texts = list[tuple[int, str]]  # (spot: a position among the conversation's messages, text)


def _check_depth(depth: object, what: str) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < TOP:
        raise ValueError(f"{what} must be an integer >= -1, not {depth!r}")
    return depth


def _texts(context: PromptContext) -> list[tuple[str, int]]:
    """The context's texts in their order (blocks, then the nudge), with their depths."""
    if not isinstance(context, PromptContext):
        raise TypeError(f"context must be an stm.PromptContext, not {type(context).__name__}")
    texts = [(block.text, _check_depth(block.depth, "a block's depth")) for block in context.blocks]
    if context.nudge:
        texts.append((context.nudge, _check_depth(context.nudge_depth, "nudge_depth")))
    return texts


def _spots(
    context: PromptContext, size: int, allowed: Callable[[int], bool], *, top_apart: bool
) -> tuple[list[str], Texts]:
    """The top's texts when ``top_apart`` (they go to a system prompt of their own), and
    every other text with its spot (0: before the conversation's first message, ``size``:
    after its last), moved up to the nearest allowed spot, in placing order (by spot;
    texts of one spot as listed)."""
    top: list[str] = []
    placed: Texts = []
    for text, depth in _texts(context):
        if depth == TOP:
            if top_apart:
                top.append(text)
            else:
                placed.append((0, text))
            continue
        spot = max(0, size - depth)
        while spot > 0 and not allowed(spot):
            spot -= 1
        placed.append((spot, text))
    placed.sort(key=lambda item: item[0])  # stable: one spot's texts keep their order
    return top, placed


def _copies(messages: object, what: str) -> list[Message]:
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(f"{what} must be a list of dicts, not {type(messages).__name__}")
    copied = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"{what} must hold dicts, not {type(message).__name__}")
        copied.append(dict(message))
    return copied


# -- OpenAI chat messages and Responses input: texts are messages of their own -------------
def _openai(messages: list[Message], context: PromptContext, role: str, api: str) -> list[Message]:
    top = 0
    while top < len(messages) and messages[top].get("role") in SYSTEM_ROLES:
        top += 1
    conversation = messages[top:]

    def allowed(spot: int) -> bool:
        if spot >= len(conversation):
            return True
        after = conversation[spot]
        if api == "openai":
            # APIs refuse a request whose tool results do not follow their call directly.
            return after.get("role") != "tool"
        before = conversation[spot - 1]
        return after.get("type") not in _RESPONSES_TIED and before.get("type") != "reasoning"

    _, spots = _spots(context, len(conversation), allowed, top_apart=False)
    placed = messages[:top]
    cursor = 0
    for spot, text in spots:
        placed.extend(conversation[cursor:spot])
        cursor = spot
        placed.append({"role": role, "content": text})
    placed.extend(conversation[cursor:])
    return placed


# -- Anthropic Messages and Gemini contents: texts join user turns -------------------------
def _anthropic_blocks(content: object) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, Sequence) and not isinstance(content, bytes | Mapping):
        return list(content)
    raise TypeError(f"an Anthropic message's content is a string or a list of blocks, not "
                    f"{type(content).__name__}")  # fmt: skip


def _is_tool_result(block: object) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_result"


def _anthropic_join(message: Message, texts: list[str], at_start: bool) -> None:
    blocks = _anthropic_blocks(message.get("content", ""))
    new = [{"type": "text", "text": text} for text in texts]
    if at_start:
        # Anthropic wants a user turn's tool_result blocks first: the texts come after them.
        first = 0
        while first < len(blocks) and _is_tool_result(blocks[first]):
            first += 1
        blocks[first:first] = new
    else:
        blocks.extend(new)
    message["content"] = blocks


def _gemini_parts(content: Mapping[str, Any]) -> list[Any]:
    parts = content.get("parts", [])
    if isinstance(parts, Sequence) and not isinstance(parts, str | bytes | Mapping):
        return list(parts)
    raise TypeError(f"a Gemini content's parts are a list, not {type(parts).__name__}")


def _answers_a_call(content: Mapping[str, Any]) -> bool:
    return any(
        isinstance(part, Mapping) and ("functionResponse" in part or "function_response" in part)
        for part in _gemini_parts(content)
    )


def _gemini_join(content: Message, texts: list[str], at_start: bool) -> None:
    parts = _gemini_parts(content)
    new = [{"text": text} for text in texts]
    content["parts"] = [*new, *parts] if at_start else [*parts, *new]


def _turns(
    messages: list[Message],
    context: PromptContext,
    *,
    is_user: Callable[[Message], bool],
    takes_text: Callable[[Message], bool],
    join: Callable[[Message, list[str], bool], None],
    turn: Callable[[list[str]], Message],
) -> tuple[list[str], list[Message]]:
    """Place the texts into an alternating list of turns: each joins the user turn at its
    spot (the one after it, else the one before), or becomes a user turn of its own where
    neither neighbour is a user turn; a spot next to a user turn that takes no text (a
    Gemini turn of function responses) moves up."""

    def allowed(spot: int) -> bool:
        near = [messages[i] for i in (spot, spot - 1) if 0 <= i < len(messages)]
        users = [m for m in near if is_user(m)]
        return not users or any(takes_text(m) for m in users)

    head, spots = _spots(context, len(messages), allowed, top_apart=True)
    by_spot: dict[int, list[str]] = {}
    for spot, text in spots:
        by_spot.setdefault(spot, []).append(text)
    placed = list(messages)
    # From the back, so that a turn inserted leaves the spots still to place where they were.
    for spot in sorted(by_spot, reverse=True):
        texts = by_spot[spot]
        after = placed[spot] if spot < len(placed) else None
        before = placed[spot - 1] if spot > 0 else None
        if after is not None and is_user(after) and takes_text(after):
            join(after, texts, True)
        elif before is not None and is_user(before) and takes_text(before):
            join(before, texts, False)
        else:
            placed.insert(spot, turn(texts))
    return head, placed


def _anthropic(messages: list[Message], context: PromptContext, system: object) -> dict[str, Any]:
    head, placed = _turns(
        messages,
        context,
        is_user=lambda m: m.get("role") == "user",
        takes_text=lambda m: True,
        join=_anthropic_join,
        turn=lambda texts: {
            "role": "user",
            "content": [{"type": "text", "text": text} for text in texts],
        },
    )
    request: dict[str, Any] = {"messages": placed}
    if system is None and not head:
        return request
    if system is None or isinstance(system, str):
        request["system"] = "\n\n".join([*([system] if system else []), *head])
    elif isinstance(system, Sequence) and not isinstance(system, bytes | Mapping):
        request["system"] = [*system, *({"type": "text", "text": text} for text in head)]
    else:
        raise TypeError(f"system is a string or a list of text blocks, not {type(system).__name__}")
    return request


def _gemini(messages: list[Message], context: PromptContext, system: object) -> dict[str, Any]:
    head, placed = _turns(
        messages,
        context,
        is_user=lambda m: m.get("role", "user") == "user",
        takes_text=lambda m: not _answers_a_call(m),
        join=_gemini_join,
        turn=lambda texts: {"role": "user", "parts": [{"text": text} for text in texts]},
    )
    request: dict[str, Any] = {"contents": placed}
    if system is None and not head:
        return request
    if system is None or isinstance(system, str):
        parts: list[Any] = [{"text": system}] if system else []
    elif isinstance(system, Mapping):
        parts = _gemini_parts(system)
    else:
        raise TypeError(f"system is a string or a Content ({{'parts': [...]}}), not "
                        f"{type(system).__name__}")  # fmt: skip
    request["systemInstruction"] = {"parts": [*parts, *({"text": text} for text in head)]}
    return request


@overload
def place(
    messages: Sequence[Mapping[str, Any]],
    context: PromptContext,
    *,
    role: str = ...,
    api: Literal["openai", "responses"] = ...,
) -> list[dict[str, Any]]: ...


@overload
def place(
    messages: Sequence[Mapping[str, Any]],
    context: PromptContext,
    *,
    api: Literal["anthropic", "gemini"],
    system: object = ...,
) -> dict[str, Any]: ...


def place(
    messages: Sequence[Mapping[str, Any]],
    context: PromptContext,
    *,
    role: str = "system",
    api: str = "openai",
    system: object = None,
) -> list[dict[str, Any]] | dict[str, Any]:
    """``messages`` with ``context``'s blocks and nudge inserted at their depths, in the
    request form of ``api`` (see the module for the rule).

    - ``"openai"`` (the default): chat-completions messages; each text is a message
      ``{"role": role, "content": text}``; returns the new list.
    - ``"responses"``: OpenAI Responses ``input`` items, the same way; returns the list.
    - ``"anthropic"``: Messages API ``messages``, with the system prompt in ``system`` (a
      string or a list of text blocks); returns ``{"system": ..., "messages": [...]}``
      (no ``system`` when there is none), ready for ``messages.create(**request, ...)``.
    - ``"gemini"``: ``contents``, with the system instruction in ``system`` (a string or a
      Content); returns ``{"contents": [...], "systemInstruction": {"parts": [...]}}``
      (no ``systemInstruction`` when there is none).

    ``messages`` is not changed; what is returned holds copies of its dicts.
    """
    if api not in PLACEMENT_APIS:
        raise ValueError(f"api must be one of {', '.join(PLACEMENT_APIS)}, not {api!r}")
    copied = _copies(messages, "messages")
    if api in ("openai", "responses"):
        if not isinstance(role, str) or not role:
            raise ValueError("role must be a non-empty string")
        if system is not None:
            raise ValueError(f"for api={api!r} the system prompt is the leading system messages")
        return _openai(copied, context, role, api)
    if role != "system":
        raise ValueError(f"role= is for the OpenAI forms; {api} texts join user turns")
    if api == "anthropic":
        return _anthropic(copied, context, system)
    return _gemini(copied, context, system)
