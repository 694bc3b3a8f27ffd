"""Which entries ``/memory show`` shows: the asker's own and the channel's, for every persona."""

from __future__ import annotations

from stm import MemoryEntry, ShortTermMemory, TurnContext
from stm._keys import parse_key, server_key, user_key

__all__ = ["entries_shown_to"]


async def _persona_ids(memory: ShortTermMemory, ctx: TurnContext) -> list[int | None]:
    # The cache and the store together name every persona with memory here: one that
    # has not talked since a restart is found by its rows.
    found: set[int] = set()
    for key in await memory.channel_keys(ctx.channel_id):
        try:
            scope = parse_key(key)
        except ValueError:
            continue
        if scope.persona_id is None:
            continue
        if (scope.scope == "user" and scope.owner_id == ctx.user_id) or (
            scope.scope == "server" and scope.owner_id == ctx.server_id
        ):
            found.add(scope.persona_id)
    return [None, *sorted(found)]


async def entries_shown_to(
    memory: ShortTermMemory, ctx: TurnContext
) -> tuple[list[MemoryEntry], list[MemoryEntry]]:
    """(the asker's own entries here, the channel's shared entries), one per persona."""
    own: list[MemoryEntry] = []
    shared: list[MemoryEntry] = []
    for persona in await _persona_ids(memory, ctx):
        entry = await memory.get_entry(user_key(ctx.user_id, ctx.channel_id, persona))
        if entry is not None:
            own.append(entry)
        if ctx.server_id is not None:
            entry = await memory.get_entry(server_key(ctx.server_id, ctx.channel_id, persona))
            if entry is not None and (entry.summary or entry.categories):
                shared.append(entry)
    return own, shared
