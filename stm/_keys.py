"""Scope keys: ``shortterm:user:{user}:{channel}[:{persona}]`` and ``shortterm:server:...``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Scope", "ScopeKey", "parse_key", "server_key", "turn_keys", "user_key"]

Scope = Literal["user", "server"]
PREFIX = "shortterm"


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """One scope of memory: whose (a user's or a server's), which channel, which persona."""

    scope: Scope
    owner_id: int
    channel_id: int
    persona_id: int | None = None

    def __str__(self) -> str:
        base = f"{PREFIX}:{self.scope}:{self.owner_id}:{self.channel_id}"
        return base if self.persona_id is None else f"{base}:{self.persona_id}"


def user_key(user_id: int, channel_id: int, persona_id: int | None = None) -> str:
    """The user-scoped key of a channel."""
    # Formatted here rather than through ScopeKey: this runs twice per turn.
    if persona_id is None:
        return f"{PREFIX}:user:{user_id}:{channel_id}"
    return f"{PREFIX}:user:{user_id}:{channel_id}:{persona_id}"


def server_key(server_id: int, channel_id: int, persona_id: int | None = None) -> str:
    """The server-scoped key of a channel."""
    if persona_id is None:
        return f"{PREFIX}:server:{server_id}:{channel_id}"
    return f"{PREFIX}:server:{server_id}:{channel_id}:{persona_id}"


def turn_keys(
    user_id: int, channel_id: int, server_id: int | None, persona_id: int | None
) -> tuple[str, str | None]:
    """The keys one turn writes to: (user key, server key or None in a DM)."""
    user = user_key(user_id, channel_id, persona_id)
    if server_id is None:
        return user, None
    return user, server_key(server_id, channel_id, persona_id)


def parse_key(key: str) -> ScopeKey:
    """Parse a scope key; raise ValueError for anything else."""
    if not isinstance(key, str):
        raise ValueError(f"a scope key must be a string, not {type(key).__name__}")
    parts = key.split(":")
    if len(parts) not in (4, 5) or parts[0] != PREFIX or parts[1] not in ("user", "server"):
        raise ValueError(f"not a short-term memory key: {key!r}")
    try:
        numbers = [int(part) for part in parts[2:]]
    except ValueError:
        raise ValueError(f"not a short-term memory key: {key!r}") from None
    scope: Scope = "user" if parts[1] == "user" else "server"
    persona = numbers[2] if len(numbers) == 3 else None
    parsed = ScopeKey(scope, numbers[0], numbers[1], persona)
    if str(parsed) != key or not all(0 <= n < 2**63 for n in numbers):
        raise ValueError(f"not a canonical short-term memory key: {key!r}")
    return parsed
