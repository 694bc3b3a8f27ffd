"""``stm.place`` for each model API: whatever the depths, the request it returns has the
shape the provider documents, every text of the context is in it once, and the caller's
own messages are unchanged and in their order.

The shapes are written here from the providers' API references:
- OpenAI Chat Completions: ``messages`` of ``system``/``developer``/``user``/
  ``assistant``/``tool``; each ``tool`` message answers a ``tool_calls`` id of the
  assistant message right before the run of tool messages it belongs to.
- OpenAI Responses: ``input`` items; a ``function_call_output`` follows the calls it
  answers with only calls and outputs in between, and a ``reasoning`` item is followed by
  the item it came with (a call or an assistant message).
- Anthropic Messages: ``system`` apart (a string or text blocks); ``messages`` of
  ``user`` and ``assistant`` only, alternating, starting with ``user``; an assistant
  turn's ``tool_use`` blocks are answered by ``tool_result`` blocks at the start of the
  next user turn.
- Gemini ``generateContent``: ``systemInstruction`` apart, text parts only; ``contents``
  of ``user`` and ``model`` turns with non-empty ``parts``, one kind of data per part; a
  model turn's ``functionCall`` parts are answered by as many ``functionResponse`` parts
  in the turn right after it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stm import PromptBlock, PromptContext, place

Message = dict[str, Any]


# -- the documented shapes ------------------------------------------------------------
def openai_errors(messages: list[Message]) -> list[str]:
    errors = []
    pending: set[str] = set()
    for n, m in enumerate(messages):
        role = m.get("role")
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            errors.append(f"{n}: role {role!r}")
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                errors.append(f"{n}: a tool result not right after its call")
            pending.discard(m.get("tool_call_id"))
            continue
        if pending:
            errors.append(f"{n}: calls {sorted(pending)} unanswered before it")
        pending = {c["id"] for c in m.get("tool_calls", [])} if role == "assistant" else set()
    return errors


TIED = {"function_call", "function_call_output"}


def responses_errors(items: list[Message]) -> list[str]:
    errors = []
    calls: set[str] = set()
    for n, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in {
            "user",
            "assistant",
            "system",
            "developer",
        }:
            errors.append(f"{n}: role {item.get('role')!r}")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            if item["call_id"] not in calls:
                errors.append(f"{n}: an output without its call before it")
            previous = items[n - 1].get("type") if n else None
            if previous not in TIED:
                errors.append(f"{n}: an output apart from its call")
        if kind == "reasoning":
            following = items[n + 1] if n + 1 < len(items) else {}
            if following.get("type") != "function_call" and following.get("role") != "assistant":
                errors.append(f"{n}: a reasoning item without its required following item")
    return errors


def anthropic_errors(request: dict[str, Any]) -> list[str]:
    errors = []
    if set(request) - {"system", "messages"}:
        errors.append(f"keys {sorted(request)}")
    system = request.get("system")
    if not (system is None or isinstance(system, str)) and not all(
        b.get("type") == "text" and b.get("text") for b in system
    ):
        errors.append("system holds something other than text blocks")
    messages = request["messages"]
    if messages and messages[0]["role"] != "user":
        errors.append("the first message is not the user's")
    for n, m in enumerate(messages):
        if m["role"] not in {"user", "assistant"}:
            errors.append(f"{n}: role {m['role']!r}")
        if n and m["role"] == messages[n - 1]["role"]:
            errors.append(f"{n}: two {m['role']} turns in a row")
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not blocks or not all(isinstance(b, dict) and b.get("type") for b in blocks):
            errors.append(f"{n}: content is not a non-empty list of typed blocks")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if uses:
            following = messages[n + 1]["content"] if n + 1 < len(messages) else []
            head = [b for b in following[: len(uses)] if isinstance(b, dict)]
            if [b.get("tool_use_id") for b in head] != uses:
                errors.append(f"{n}: tool_use not answered first in the next user turn")
        results = [i for i, b in enumerate(blocks) if b.get("type") == "tool_result"]
        if results != list(range(len(results))):
            errors.append(f"{n}: tool_result blocks are not first")
    return errors


PART_DATA = {"text", "inlineData", "fileData", "functionCall", "functionResponse"}


def gemini_errors(request: dict[str, Any]) -> list[str]:
    errors = []
    if set(request) - {"systemInstruction", "contents"}:
        errors.append(f"keys {sorted(request)}")
    system = request.get("systemInstruction")
    if system is not None and not all(set(p) == {"text"} for p in system["parts"]):
        errors.append("systemInstruction holds something other than text parts")
    contents = request["contents"]
    for n, content in enumerate(contents):
        if content.get("role") not in {"user", "model"}:
            errors.append(f"{n}: role {content.get('role')!r}")
        parts = content.get("parts")
        if not parts or not all(len(set(p) & PART_DATA) == 1 for p in parts):
            errors.append(f"{n}: parts must be non-empty, one kind of data each")
            continue
        calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        if calls:
            following = contents[n + 1]["parts"] if n + 1 < len(contents) else []
            answers = [p["functionResponse"]["name"] for p in following if "functionResponse" in p]
            if answers != calls:
                errors.append(f"{n}: function calls not answered in the next turn")
        if any("functionResponse" in p for p in parts):
            previous = contents[n - 1]["parts"] if n else []
            if not any("functionCall" in p for p in previous):
                errors.append(f"{n}: function responses apart from their call")
    return errors


# -- conversations, as each API writes them -------------------------------------------
def conversation(api: str, shape: list[str]) -> list[Message]:
    """``shape``: ``say`` (a user turn and the answer) or ``tool`` (a user turn, a tool
    call, its result and the answer), in each API's own form."""
    out: list[Message] = []
    for n, step in enumerate(shape):
        user = f"u{n}"
        if api == "gemini":
            out.append({"role": "user", "parts": [{"text": user}]})
            if step == "tool":
                call = {"name": "look", "args": {"q": n}}
                out.append({"role": "model", "parts": [{"functionCall": call}]})
                answer = {"name": "look", "response": {"r": n}}
                out.append({"role": "user", "parts": [{"functionResponse": answer}]})
            out.append({"role": "model", "parts": [{"text": f"a{n}"}]})
        elif api == "anthropic":
            if step == "tool":
                out.append({"role": "user", "content": user})
                use = {"type": "tool_use", "id": f"t{n}", "name": "look", "input": {}}
                out.append({"role": "assistant", "content": [use]})
                result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "r"}
                out.append({"role": "user", "content": [result]})
            else:
                out.append({"role": "user", "content": [{"type": "text", "text": user}]})
            out.append({"role": "assistant", "content": f"a{n}"})
        elif api == "responses":
            out.append({"role": "user", "content": user})
            if step == "tool":
                out.append({"type": "reasoning", "id": f"rs{n}", "summary": []})
                out.append(
                    {"type": "function_call", "call_id": f"c{n}", "name": "look", "arguments": "{}"}
                )
                out.append({"type": "function_call_output", "call_id": f"c{n}", "output": "r"})
            out.append({"role": "assistant", "content": f"a{n}"})
        else:
            out.append({"role": "user", "content": user})
            if step == "tool":
                call = {
                    "id": f"c{n}",
                    "type": "function",
                    "function": {"name": "look", "arguments": "{}"},
                }
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                out.append({"role": "tool", "tool_call_id": f"c{n}", "content": "r"})
            out.append({"role": "assistant", "content": f"a{n}"})
    if shape:
        out.append(out[0] | {})  # the turn being answered: a user message last
    return out


def texts_in(value: object) -> list[str]:
    """Every memory text (``M...``) anywhere in a request, in order."""
    if isinstance(value, str):  # Anthropic's system string holds its texts after blank lines
        return [part for part in value.split("\n\n") if part.startswith("M")]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts_in(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts_in(v)]
    return []


def without_memory(value: Any) -> Any:
    """The request with every memory text (and what holds only memory) taken out."""
    if isinstance(value, dict):
        if value.get("type") == "text" and str(value.get("text", "")).startswith("M"):
            return None
        if set(value) == {"text"} and str(value["text"]).startswith("M"):
            return None
        if str(value.get("content", "")).startswith("M"):
            return None  # an OpenAI memory message
        kept = {
            k: v for k, v in ((k, without_memory(v)) for k, v in value.items()) if v is not None
        }
        if "parts" in value and kept.get("parts") == [] and set(kept) == {"parts"}:
            return None  # a system instruction of memory alone
        # A user turn made only of memory is memory.
        if kept.get("content") == [] or kept.get("parts") == []:
            return None
        return kept
    if isinstance(value, list):
        return [v for v in (without_memory(v) for v in value) if v is not None]
    if isinstance(value, str):
        return "\n\n".join(p for p in value.split("\n\n") if not p.startswith("M")) or None
    return value


ERRORS = {
    "openai": lambda placed, system: openai_errors(placed),
    "responses": lambda placed, system: responses_errors(placed),
    "anthropic": lambda placed, system: anthropic_errors(placed),
    "gemini": lambda placed, system: gemini_errors(placed),
}


def placed_for(api: str, messages: list[Message], context: PromptContext, system: str | None):
    if api in ("anthropic", "gemini"):
        return place(messages, context, api=api, system=system)  # type: ignore[call-overload]
    head = [{"role": "system", "content": system}] if system else []
    return place([*head, *messages], context, api=api)  # type: ignore[call-overload]


@pytest.mark.parametrize("api", ["openai", "responses", "anthropic", "gemini"])
@given(
    shape=st.lists(st.sampled_from(["say", "tool"]), max_size=4),
    depths=st.lists(st.integers(-1, 14), max_size=4),
    nudge=st.one_of(st.none(), st.integers(-1, 14)),
    system=st.sampled_from([None, "You are a bot."]),
)
def test_property_every_api_gets_a_valid_request_with_every_text_once(
    api: str, shape: list[str], depths: list[int], nudge: int | None, system: str | None
):
    messages = conversation(api, shape)
    assert not ERRORS[api](placed_for(api, messages, PromptContext(), system), system)
    context = PromptContext(
        blocks=[PromptBlock(f"M{n}", d) for n, d in enumerate(depths)],
        nudge=None if nudge is None else "Mnudge",
        nudge_depth=2 if nudge is None else nudge,
    )
    placed = placed_for(api, messages, context, system)
    assert ERRORS[api](placed, system) == []
    wanted = [b.text for b in context.blocks] + ([] if nudge is None else ["Mnudge"])
    assert sorted(texts_in(placed)) == sorted(wanted)
    # Nothing of the caller's changed (a string content may have become one text block).
    original = placed_for(api, messages, PromptContext(), system)
    assert _plain(without_memory(placed)) == _plain(without_memory(original))
    assert conversation(api, shape) == messages  # the caller's list is left alone


def _plain(value: Any) -> Any:
    """Content written as one text block and as a string compare equal."""
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text":
            value = {**value, "content": content[0]["text"]}
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# -- where the texts go ---------------------------------------------------------------
def test_anthropic_memory_at_the_top_goes_into_the_system_prompt():
    placed = place(
        [{"role": "user", "content": "hi"}],
        PromptContext(blocks=[PromptBlock("Mtop", -1)], nudge="Mnudge", nudge_depth=0),
        api="anthropic",
        system="You are a bot.",
    )
    assert placed == {
        "system": "You are a bot.\n\nMtop",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "Mnudge"}],
            },
        ],
    }


def test_anthropic_text_after_a_tool_result_follows_the_results():
    messages = conversation("anthropic", ["tool"])[:3]  # user, tool_use, tool_result
    placed = place(messages, PromptContext(nudge="Mnudge", nudge_depth=0), api="anthropic")
    last = placed["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert "system" not in placed


def test_anthropic_text_between_two_assistant_turns_is_a_user_turn_of_its_own():
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    placed = place(messages, PromptContext(nudge="Mnudge", nudge_depth=0), api="anthropic")
    assert placed["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Mnudge"}],
    }


def test_gemini_memory_goes_to_the_system_instruction_and_user_turns():
    messages = conversation("gemini", ["tool"])
    placed = place(
        messages,
        PromptContext(blocks=[PromptBlock("Mtop", -1), PromptBlock("Mlast", 0)]),
        api="gemini",
        system={"parts": [{"text": "You are a bot."}]},
    )
    assert placed["systemInstruction"] == {"parts": [{"text": "You are a bot."}, {"text": "Mtop"}]}
    assert placed["contents"][-1] == {"role": "user", "parts": [{"text": "u0"}, {"text": "Mlast"}]}


def test_gemini_text_never_joins_a_turn_of_function_responses():
    messages = conversation("gemini", ["tool"])[:3]  # user, functionCall, functionResponse
    placed = place(messages, PromptContext(nudge="Mnudge", nudge_depth=0), api="gemini")
    assert placed["contents"][2]["parts"] == messages[2]["parts"]
    assert placed["contents"][0]["parts"][-1] == {"text": "Mnudge"}  # moved up, before the call


def test_responses_text_never_splits_reasoning_from_its_call():
    messages = conversation("responses", ["tool"])[:4]  # user, reasoning, call, output
    placed = place(messages, PromptContext(nudge="Mnudge", nudge_depth=1), api="responses")
    assert [m.get("type", m.get("role")) for m in placed] == [
        "user",
        "system",
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_the_validators_can_fail():
    """Each shape check refuses what its API refuses."""
    bad_openai = [{"role": "user", "content": "u"}, {"role": "tool", "tool_call_id": "x"}]
    assert openai_errors(bad_openai)
    responses = conversation("responses", ["tool"])
    assert responses_errors([*responses[:2], {"role": "system", "content": "M"}, *responses[2:]])
    assert anthropic_errors({"messages": [{"role": "system", "content": "s"}]})
    anthropic = conversation("anthropic", ["tool"])
    assert anthropic_errors(
        {"messages": [*anthropic[:2], {"role": "user", "content": "M"}, *anthropic[2:]]}
    )
    gemini = conversation("gemini", ["tool"])
    mixed = {"role": "user", "parts": [{"text": "M", "functionCall": {"name": "x"}}]}
    assert gemini_errors({"contents": [mixed]})
    assert gemini_errors(
        {"contents": [*gemini[:2], {"role": "user", "parts": [{"text": "M"}]}, *gemini[2:]]}
    )


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"api": "cohere"}, ValueError),
        ({"api": "anthropic", "role": "user"}, ValueError),
        ({"api": "openai", "system": "s"}, ValueError),
        ({"api": "anthropic", "system": 3}, TypeError),
    ],
)
def test_a_wrong_option_is_refused_with_a_clear_error(options: dict[str, Any], error: type):
    context = PromptContext(blocks=[PromptBlock("M", -1)])
    with pytest.raises(error):
        place([{"role": "user", "content": "u"}], context, **options)
