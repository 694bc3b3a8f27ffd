"""Text of the replies that show memory and settings to people (pure functions)."""

from __future__ import annotations

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


def describe_memory(
    own: MemoryEntry | None,
    shared: MemoryEntry | None,
    *,
    opted_out: bool,
    bot_name: str,
    labels: dict[str, str],
) -> str:
    """What ``/memory show`` answers: the asker's memory here and the channel's shared notes."""
    lines: list[str] = []
    if opted_out:
        lines.append(
            f"You paused short-term memory: {bot_name} does not remember your new messages "
            "(`/memory resume` to undo)."
        )
    if shared is not None and not (shared.summary or shared.categories):
        shared = None
    if own is None and shared is None:
        lines.append(f"{bot_name} holds no short-term memory about you in this channel.")
        return "\n".join(lines)
    if own is not None:
        lines.append(f"**What {bot_name} holds about you in this channel**")
        distilled = _distilled(own, labels)
        if distilled:
            lines.append("Notes:")
            lines.extend(distilled)
        if own.messages:
            lines.append(f"Recent messages ({len(own.messages)}):")
            for message in own.messages:
                speaker = message.speaker_name or (
                    bot_name if message.role == "assistant" else "you"
                )
                content = discord.utils.escape_markdown(message.content.replace("\n", " "))
                lines.append(f"> **{discord.utils.escape_markdown(speaker)}:** {content}")
        lines.append(f"Expires {_when(own.expires_at)} unless the conversation continues.")
    if shared is not None:
        lines.append("")
        lines.append("**Shared notes of this channel** (seen by everyone talking here)")
        lines.extend(_distilled(shared, labels))
        lines.append(f"Expires {_when(shared.expires_at)}.")
    lines.append("")
    lines.append("`/memory forget` erases everything held about you.")
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
