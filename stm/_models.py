"""The plain values the library takes and returns: turns, messages, results, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Literal

import pydantic
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
)

from ._config import (
    ContextTokenBudget,
    CrudeMessageCount,
    RefreshCadence,
    RenderMode,
    STMConfig,
)
from ._inputs import DialogueMessage, GenerationFinished, TurnContext
from ._text import clean_name, visible

__all__ = [
    "DEFAULT_CATEGORY",
    "Category",
    "DialogueMessage",
    "GenerationFinished",
    "MemoryEntry",
    "Omission",
    "PromptBlock",
    "PromptContext",
    "PurgeImpact",
    "ServerSettings",
    "ToolResult",
    "TurnContext",
    "is_summary_mode",
]


def utcnow() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(UTC)


class ToolResult(BaseModel):
    """What a tool call returns to the model."""

    model_config = ConfigDict(frozen=True)

    success: bool
    message: str


@dataclass(frozen=True, slots=True)
class PromptBlock:
    """Text to place into the prompt, ``depth`` messages back from the end (-1: the top)."""

    text: str
    depth: int


@dataclass(frozen=True, slots=True)
class Omission:
    """What the token budget left out of a turn's memory: ``kind`` is ``tool``, ``nudge``,
    ``channel_notes``, ``other_notes`` or ``other_messages``; ``key`` the scope key it came
    from (None for the tool and the nudge); ``lines`` how many quoted lines were left out."""

    kind: str
    key: str | None = None
    lines: int = 0


@dataclass(slots=True)
class PromptContext:
    """The Short-Term Memory Context of one turn.

    Under a token budget, ``tokens`` is what memory adds to the prompt (blocks, nudge and
    the tool's definition when offered) and ``dropped`` what was left out to fit; without
    a budget ``tokens`` is None (nothing was counted)."""

    blocks: list[PromptBlock] = field(default_factory=list)
    nudge: str | None = None
    nudge_depth: int = 2
    tokens: int | None = None
    dropped: tuple[Omission, ...] = ()

    def __str__(self) -> str:
        parts = [block.text for block in self.blocks]
        if self.nudge:
            parts.append(self.nudge)
        return "\n\n".join(parts)

    def __bool__(self) -> bool:
        return bool(self.blocks) or self.nudge is not None


@dataclass(frozen=True, slots=True)
class PurgeImpact:
    """What a user purge erases: the user's own entries, and the other entries whose notes
    it clears (they may hold the user's words), under the erasure policy ``erasure``.

    From ``preview_purge`` before, from ``purge`` after. ``shared_by_server`` and
    ``distilled_by_server`` count, per server (None: DMs), the shared notes it clears
    and all the distilled entries the server holds (before it), so that whoever purges
    sees what share of a server's memory goes; after a purge, as the store counted them
    when it planned the purge. A server's distilled entries are counted up to ten times
    what the purge clears there (and a thousand more): a server in ``distilled_at_least``
    holds at least its count, and the purge clears under a tenth of it."""

    user_id: int
    server_id: int | None
    erasure: str
    own: int
    shared: int
    shared_by_server: dict[int | None, int] = field(default_factory=dict)
    distilled_by_server: dict[int | None, int] = field(default_factory=dict)
    distilled_at_least: frozenset[int] = frozenset()

    def share_of(self, server_id: int) -> float:
        """The share (0 to 1) of the server's distilled entries whose notes it clears (at
        most this, for a server in ``distilled_at_least``)."""
        total = self.distilled_by_server.get(server_id, 0)
        return self.shared_by_server.get(server_id, 0) / total if total else 0.0


def _one_line(value: object) -> object:
    # Before the length checks, so that a lone surrogate is dropped, not refused; too long
    # is still refused rather than cut.
    return clean_name(value, len(value)) if isinstance(value, str) else value


@pydantic.dataclasses.dataclass(frozen=True)
class Category:
    """A named field of the distilled memory of a server: ``Category(label, description)``."""

    # Labels and descriptions reach the prompt (as labels and in the tool's schema): one
    # line each, cleaned like a tool argument.
    label: Annotated[str, Field(min_length=1, max_length=100), BeforeValidator(_one_line)]
    description: Annotated[str, Field(max_length=1000), BeforeValidator(_one_line)] = ""

    def __post_init__(self) -> None:
        if not visible(self.label):
            raise ValueError(
                "a category label must not be blank (spaces and invisible characters alone "
                "count as blank)"
            )


DEFAULT_CATEGORY = Category(
    "summary", "A running summary of recent events, topics, and context from this conversation."
)


def is_summary_mode(categories: tuple[Category, ...]) -> bool:
    """Summary mode (one ``summary`` value, no categories) is having only the default
    category; a category labelled ``summary`` with its own description is a category."""
    return categories == (DEFAULT_CATEGORY,)


# The languages of what the model reads, one locale file each (``stm/locales``).
Language = Literal["en", "ja"]

_OPERATOR = STMConfig.model_fields


class ServerSettings(BaseModel):
    """Per-server behaviour; a server never configured gets the global defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # The library's defaults of the operator's settings; a server's stored settings hold
    # only what its admins set, and the rest follow the operator's (SERVER_DEFAULTS).
    render_mode: RenderMode = _OPERATOR["render_mode"].default
    refresh_cadence: Annotated[RefreshCadence, Strict()] = _OPERATOR["refresh_cadence"].default
    crude_message_count: Annotated[CrudeMessageCount, Strict()] = _OPERATOR[
        "crude_message_count"
    ].default
    categories: tuple[Category, ...] = (DEFAULT_CATEGORY,)
    # Both reach the model as text (the tool's description, a system line): one line each.
    tool_description: Annotated[str, BeforeValidator(_one_line)] | None = Field(
        None, max_length=1024
    )
    nudge_text: Annotated[str, BeforeValidator(_one_line)] | None = Field(None, max_length=1024)
    nudge_depth: StrictInt = Field(2, ge=-1, le=100)
    content_depth: StrictInt = Field(-1, ge=-1, le=100)
    enabled: StrictBool = True
    # Purge a member who leaves the server or is banned from it, as /purge-memory does.
    purge_leavers: StrictBool = False
    # Tokens memory may add to a prompt here; None: the operator's STM_CONTEXT_TOKEN_BUDGET;
    # 0: no budget of the server's own. Never above the operator's budget when one is set.
    context_token_budget: Annotated[ContextTokenBudget, Strict()] | None = None
    # The language of what the model reads (frames, nudge, tool); None: the server's
    # preferred locale when the host passes it (TurnContext.server_locale), else English.
    language: Language | None = None

    @property
    def summary_mode(self) -> bool:
        """True when the server has only the default category: the tool takes one summary."""
        return is_summary_mode(self.categories)


class MemoryEntry(BaseModel):
    """A snapshot of what is held under one scope key."""

    model_config = ConfigDict(frozen=True)

    key: str
    messages: list[DialogueMessage]
    summary: str | None
    categories: dict[str, str]
    turns_since_refresh: int
    last_refreshed_turn: int = 0
    server_id: int | None = None
    user_id: int | None = None
    channel_id: int = 0
    persona_id: int | None = None
    channel_name: str | None = None
    server_name: str | None = None
    parent_channel_id: int | None = None
    channel_is_private: bool = False
    updated_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(default_factory=utcnow)
