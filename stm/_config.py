"""STMConfig: every setting of the library, read from ``STM_*`` environment variables."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ._errors import ConfigError
from ._lineage import Erasure

__all__ = [
    "ENV_PREFIX",
    "MAX_CONTEXT_TOKEN_BUDGET",
    "MAX_NOTE_HISTORY",
    "SERVER_DEFAULTS",
    "ContextTokenBudget",
    "CrudeMessageCount",
    "RefreshCadence",
    "RenderMode",
    "STMConfig",
]

ENV_PREFIX = "STM_"
RenderMode = Literal["crude_summary", "supersede"]
# Ten years: far beyond "short-term", and well inside what datetime can represent.
MAX_TTL_HOURS = 87_600
# Far past any model's context window.
MAX_CONTEXT_TOKEN_BUDGET = 10_000_000
# Earlier versions of notes an entry may keep (``note_history``).
MAX_NOTE_HISTORY = 20

# The settings a server's admins may also choose (``ServerSettings``) have their bounds
# written here once, for both models.
RefreshCadence = Annotated[int, Field(ge=1, le=10_000)]
CrudeMessageCount = Annotated[int, Field(ge=0, le=1000)]
ContextTokenBudget = Annotated[int, Field(ge=0, le=MAX_CONTEXT_TOKEN_BUDGET)]
# Those whose value, where a server's admins did not set it, is the operator's setting of
# the same name (a server's own token budget is instead capped by the operator's).
SERVER_DEFAULTS = ("render_mode", "refresh_cadence", "crude_message_count")


class STMConfig(BaseSettings):
    """Settings of the short-term memory; each field is also ``STM_<FIELD>`` in the environment."""

    # No infinities or NaN, and an upper bound on every number: a value the code cannot
    # represent (an expiry past the year 9999, a sleep of 1e300 s) must fail at start,
    # naming its variable, not on some later turn.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", frozen=True, allow_inf_nan=False
    )

    database: str = Field(
        "data/stm.sqlite3",
        description="SQLite path or ':memory:'; a postgresql:// URL selects PostgreSQL.",
        min_length=1,
    )
    max_messages_per_channel: int = Field(10, ge=1, le=1000)
    crude_ttl_hours: float = Field(12.0, gt=0, le=MAX_TTL_HOURS)
    summary_ttl_hours: float = Field(24.0, gt=0, le=MAX_TTL_HOURS)
    max_summary_length: int = Field(1500, ge=1, le=100_000)
    # Discord's own limit is 4000 characters; a host that batches may send longer ones,
    # which are cut so that one message cannot fill every prompt that recalls it.
    max_message_length: int = Field(4000, ge=1, le=100_000)
    max_categories: int = Field(5, ge=1, le=25)
    max_other_channels: int = Field(3, ge=0, le=50)
    refresh_cadence: RefreshCadence = 5
    render_mode: RenderMode = "crude_summary"
    crude_message_count: CrudeMessageCount = 6
    janitor_interval_minutes: float = Field(60.0, gt=0, le=525_600)
    # Beyond the contract: knobs of the cache and the write path.
    cache_max_keys: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="Scope keys held in memory; keys used again while held are evicted last.",
    )
    write_behind_seconds: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="How long counters and identity rows may wait to be written.",
    )
    busy_timeout_ms: int = Field(
        5000,
        ge=0,
        le=600_000,
        description="How long to wait for a lock another process holds (SQLite's busy "
        "timeout, PostgreSQL's lock_timeout).",
    )
    statement_timeout_ms: int = Field(
        10_000,
        ge=100,
        le=3_600_000,
        description="PostgreSQL: how long one statement, a connection, or an answer from the "
        "server may take; also how long a session may sit idle inside a transaction.",
    )
    journal: str | None = Field(
        None,
        min_length=1,
        description="Where deletes that could not be committed yet are kept until they are "
        "(default: beside an SQLite file; a file named for the server's URL in the state "
        "folder for PostgreSQL).",
    )
    scrub_delay_seconds: float = Field(
        1.0,
        gt=0,
        le=86_400,
        description="How soon after a delete its erased data is emptied from the WAL "
        "(bursts of deletes share one scrub).",
    )
    delete_retry_seconds: float = Field(
        1.0, gt=0, le=3600, description="First wait before a failed durable delete is retried."
    )
    erasure: Erasure = Field(
        "direct",
        description="What a user purge clears besides the user's own entries and messages: "
        "'direct', every version of notes whose prompt showed their words directly and the "
        "later versions of those notes; 'complete', also notes written from a prompt that "
        "showed such notes (see docs/data.md).",
    )
    note_history: int = Field(
        3,
        ge=0,
        le=MAX_NOTE_HISTORY,
        description="Earlier versions of each entry's notes kept for /memory show, "
        "'python -m stm history' and restores (0 turns history off); never rendered, "
        "erased with the notes (see docs/data.md).",
    )
    context_token_budget: ContextTokenBudget | None = Field(
        None,
        description="Tokens memory may add to one prompt (its notes, other channels' notes and "
        "messages, the nudge, the tool's definition); 0 or unset: no budget. Servers may "
        "set a lower one.",
    )
    coherence_seconds: float = Field(
        2.0,
        ge=0.1,
        le=300,
        description="How soon a change committed by another process on the same database "
        "(a purge, a clear, an upgrade) is honoured by this one.",
    )
    server_removal_grace_minutes: float = Field(
        60.0,
        ge=0,
        le=525_600,
        description="How long after the bot is removed from a server its memory and settings "
        "there are cleared (0: at once); a re-invite within it keeps them.",
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "?"
        value = error.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"{ENV_PREFIX}{field.upper()}: {error['msg']}{shown}")
    return "invalid short-term memory setting: " + "; ".join(lines)
