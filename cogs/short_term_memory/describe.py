"""Text of the replies that show memory and settings to people (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import discord

from stm import MemoryEntry, ServerSettings

__all__ = ["describe_memory", "describe_settings"]


def _when(moment: datetime) -> str:
    return discord.utils.format_dt(moment, "R")


def _quoted(text: str) -> str:
    return "\n".join("> " + discord.utils.escape_markdown(line) for line in text.splitlines())


def _distilled(entry: MemoryEntry, labels: dict[str, str]) -> list[str]:
    if entry.categories:
        return [
            f"**{discord.utils.escape_markdown(labels.get(slug, slug))}**\n{_quoted(value)}"
            for slug, value in entry.categories.items()
        ]
    if entry.summary:
        return [_quoted(entry.summary)]
    return []


def _persona(entry: MemoryEntry) -> str:
    return "" if entry.persona_id is None else f" (persona {entry.persona_id})"


def describe_memory(
    own: Sequence[MemoryEntry],
    shared: Sequence[MemoryEntry],
    *,
    opted_out: bool,
    bot_name: str,
    labels: dict[str, str],
    forget: str | None = "`/memory forget`",
    resume: str | None = "`/memory resume`",
) -> str:
    """What ``/memory show`` answers: the asker's memory here and the channel's shared notes.

    ``own`` and ``shared`` hold one entry per persona; ``forget`` and ``resume`` are how
    to write those commands (None where the bot left them out).
    """
    lines: list[str] = []
    if opted_out:
        undo = f" ({resume} to undo)" if resume else ""
        lines.append(
            f"You paused short-term memory: {bot_name} does not remember your new messages{undo}."
        )
    if not own and not shared:
        lines.append(f"{bot_name} holds no short-term memory about you in this channel.")
        return "\n".join(lines)
    for entry in own:
        lines.append(f"**What {bot_name} holds about you in this channel{_persona(entry)}**")
        distilled = _distilled(entry, labels)
        if distilled:
            lines.append("Notes:")
            lines.extend(distilled)
        if entry.messages:
            lines.append(f"Recent messages ({len(entry.messages)}):")
            for message in entry.messages:
                speaker = message.speaker_name or (
                    bot_name if message.role == "assistant" else "you"
                )
                content = discord.utils.escape_markdown(message.content.replace("\n", " "))
                lines.append(f"> **{discord.utils.escape_markdown(speaker)}:** {content}")
        lines.append(f"Expires {_when(entry.expires_at)} unless the conversation continues.")
    for entry in shared:
        lines.append("")
        lines.append(
            f"**Shared notes of this channel{_persona(entry)}** (seen by everyone talking here)"
        )
        lines.extend(_distilled(entry, labels))
        lines.append(f"Expires {_when(entry.expires_at)}.")
    if forget:
        lines.append("")
        lines.append(f"{forget} erases everything held about you.")
    return "\n".join(lines)


def describe_settings(settings: ServerSettings, max_categories: int) -> str:
    """What ``/memory-settings show`` answers."""
    state = "on" if settings.enabled else "off"
    lines = [
        f"Short-term memory is **{state}** in this server.",
        f"Render mode: `{settings.render_mode}`",
        f"Refresh cadence: every {settings.refresh_cadence} turns",
        f"Crude messages shown per other channel: {settings.crude_message_count}",
        f"Categories ({len(settings.categories)}/{max_categories}):",
    ]
    for category in settings.categories:
        description = discord.utils.escape_markdown(category.description) or "(no description)"
        lines.append(f"- **{discord.utils.escape_markdown(category.label)}**: {description}")
    return "\n".join(lines)
