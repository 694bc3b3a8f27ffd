"""Text of the replies that show memory and settings to people (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import discord

from stm import MemoryEntry, PurgeImpact, RecentPurges, ServerSettings

__all__ = [
    "describe_forget_done",
    "describe_forget_preview",
    "describe_memory",
    "describe_purge_answered",
    "describe_purge_cancelled",
    "describe_purge_done",
    "describe_purge_erasing",
    "describe_purge_expired",
    "describe_purge_not_yours",
    "describe_purge_preview",
    "describe_recent_purges",
    "describe_settings",
    "purge_buttons",
]


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


def describe_settings(
    settings: ServerSettings, max_categories: int, *, budget: int | None = None
) -> str:
    """What ``/memory-settings show`` answers; ``budget``: the token budget in force."""
    state = "on" if settings.enabled else "off"
    lines = [
        f"Short-term memory is **{state}** in this server.",
        f"Render mode: `{settings.render_mode}`",
        f"Refresh cadence: every {settings.refresh_cadence} turns",
        f"Crude messages shown per other channel: {settings.crude_message_count}",
        "Members who leave or are banned: "
        + ("their memory here is erased" if settings.purge_leavers else "kept until it expires"),
        "Tokens memory may add to each prompt: "
        + ("no limit" if budget is None else f"{budget:,}"),
        f"Categories ({len(settings.categories)}/{max_categories}):",
    ]
    for category in settings.categories:
        description = discord.utils.escape_markdown(category.description) or "(no description)"
        lines.append(f"- **{discord.utils.escape_markdown(category.label)}**: {description}")
    return "\n".join(lines)


# -- purges: the preview, the buttons, the answers ------------------------------------
def purge_buttons() -> tuple[str, str]:
    """The labels of a purge confirmation's buttons: (confirm, cancel)."""
    return "Confirm", "Cancel"


def _entries(count: int, *, bold: bool = False, shared: bool = False) -> str:
    number = f"**{count}**" if bold else str(count)
    kind = "shared " if shared else ""
    return f"{number} {kind}{'entry' if count == 1 else 'entries'}"


def _share(share: float) -> str:
    return "under 1%" if 0 < share < 0.01 else f"{share:.0%}"


def _duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g} seconds"


def _rule(erasure: str) -> str:
    if erasure == "complete":
        return "notes written while those words, or notes that may hold them, were shown"
    return "notes written while those words were shown"


def _shared_parts(impact: PurgeImpact, here: int | None) -> str:
    """``N in this server (S% of what the bot remembers here); M elsewhere``."""
    if here is None:
        return f"**{impact.shared}** in all"
    in_here = impact.shared_by_server.get(here, 0)
    parts = [
        f"**{in_here}** in this server ({_share(impact.share_of(here))} of what the bot "
        "remembers here)"
        if in_here
        else "none in this server"
    ]
    elsewhere = impact.shared - in_here
    if elsewhere:
        parts.append(f"**{elsewhere}** elsewhere")
    return "; ".join(parts)


def describe_forget_preview(impact: PurgeImpact, *, here: int | None, seconds: float) -> str:
    """What ``/memory forget`` shows before it erases anything; ``here``: the server it is
    used in (None in a DM)."""
    confirm, _ = purge_buttons()
    if impact.shared:
        shared = (
            f"- the notes of {_entries(impact.shared, bold=True, shared=True)} beyond your own, "
            "which may "
            f"repeat your words ({_rule(impact.erasure)}): {_shared_parts(impact, here)}"
        )
    else:
        shared = "- no shared notes: what others see stays as it is"
    return "\n".join(
        [
            "**This erases what the bot remembers about you, in every server and DM:**",
            f"- your own entries: **{impact.own}**",
            "- your recent messages, in every conversation",
            shared,
            f"Nothing is erased until you press **{confirm}** (within {_duration(seconds)}).",
        ]
    )


def describe_forget_done(impact: PurgeImpact | None) -> str:
    """What ``/memory forget`` answers once the purge is durable (``impact`` None when the
    database could not confirm it yet)."""
    text = "Done: the bot's short-term memory about you is erased, in every server and DM"
    if impact is None:
        return text + "."
    return (
        f"{text}: {_entries(impact.own)} of your own, your recent messages, and the notes of "
        f"{_entries(impact.shared, shared=True)}."
    )


def describe_purge_preview(
    impact: PurgeImpact, *, member: str, here: int, everywhere: bool, seconds: float
) -> str:
    """What ``/purge-memory`` shows before it erases anything; ``member``: the purged
    user's mention; ``here``: the server it is used in."""
    confirm, _ = purge_buttons()
    where = "in every server and DM" if everywhere else "in this server"
    if impact.shared:
        shared = (
            f"- the notes of {_entries(impact.shared, bold=True, shared=True)} beyond their own, "
            "which may "
            f"repeat their words ({_rule(impact.erasure)}): {_shared_parts(impact, here)}"
        )
    else:
        shared = "- no shared notes: what others see stays as it is"
    return "\n".join(
        [
            f"**This erases what the bot remembers about {member} {where}:**",
            f"- their own entries: **{impact.own}**",
            f"- their recent messages {where}",
            shared,
            f"Nothing is erased until you press **{confirm}** (within {_duration(seconds)}).",
        ]
    )


def describe_purge_done(impact: PurgeImpact | None, *, member: str, everywhere: bool) -> str:
    """What ``/purge-memory`` answers once the purge is durable (``impact`` None when the
    database could not confirm it yet)."""
    where = "in every server and DM" if everywhere else "in this server"
    text = f"Done: short-term memory about {member} is erased {where}"
    if impact is None:
        return text + "."
    return (
        f"{text}: {_entries(impact.own)} of their own, their recent messages, and the notes "
        f"of {_entries(impact.shared, shared=True)}."
    )


def describe_purge_erasing() -> str:
    """What a confirmation says while its purge runs."""
    return "Erasing…"


def describe_purge_cancelled() -> str:
    """What a confirmation says once cancelled."""
    return "Cancelled: nothing was erased."


def describe_purge_expired(seconds: float) -> str:
    """What a confirmation says once nobody answered it in time."""
    return f"Not confirmed within {_duration(seconds)}: nothing was erased."


def describe_purge_not_yours() -> str:
    """The answer to someone pressing a button of another person's confirmation."""
    return "Only the person who asked for this can answer it."


def describe_purge_answered() -> str:
    """The answer to a second press of a confirmation already answered."""
    return "This was already answered."


def describe_recent_purges(recent: RecentPurges) -> str:
    """What ``/memory-settings show`` says of the server's recent purges."""
    window = f"{recent.window_seconds / 3600:g} hours"
    counted = "counted by this bot process since it started"
    if not recent.purges:
        return f"Purges in the last {window} ({counted}): none cleared shared notes here."
    text = (
        f"Purges in the last {window} ({counted}): {recent.purges} cleared the notes of "
        f"{_entries(recent.shared, shared=True)} here"
    )
    if recent.over_threshold:
        text += (
            f"; {recent.over_threshold} of them more than {_share(recent.threshold)} of the "
            "server's memory at once"
        )
    return text + "."
