"""Text of the replies that show memory and settings to people (pure functions).

Every text comes from the catalogue of the reader's language (``i18n``); ``texts``
defaults to English.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import discord
from discord import app_commands

from stm import MemoryEntry, NoteVersion, PurgeImpact, RecentPurges, ServerSettings
from stm._history import changes, version_text

from .._utils.checks import MissingServerPermission, NotOwner
from .._utils.formatting import MESSAGE_LIMIT, truncate
from ._i18n import Texts, texts_for

__all__ = [
    "ENGLISH",
    "Confirmed",
    "describe_acting",
    "describe_cancelled",
    "describe_expired",
    "describe_forget_done",
    "describe_forget_preview",
    "describe_memory",
    "describe_purge_answered",
    "describe_purge_done",
    "describe_purge_not_yours",
    "describe_purge_preview",
    "describe_recent_purges",
    "describe_refusal",
    "describe_settings",
    "purge_buttons",
]

ENGLISH = texts_for("en")


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


def _persona(entry: MemoryEntry, texts: Texts) -> str:
    return "" if entry.persona_id is None else texts("memory.persona", persona=entry.persona_id)


def describe_memory(
    own: Sequence[MemoryEntry],
    shared: Sequence[MemoryEntry],
    *,
    opted_out: bool,
    bot_name: str,
    labels: dict[str, str],
    forget: str | None = "`/memory forget`",
    resume: str | None = "`/memory resume`",
    texts: Texts = ENGLISH,
    where: str | None = None,
) -> str:
    """What ``/memory show`` answers: the asker's memory here and the channel's shared notes.

    ``own`` and ``shared`` hold one entry per persona; ``forget`` and ``resume`` are how
    to write those commands (None where the bot left them out); ``where`` says where this
    channel's memory may appear (``describe_where``).
    """
    lines: list[str] = []
    if opted_out:
        undo = texts("memory.paused_undo", resume=resume) if resume else ""
        lines.append(texts("memory.paused", bot=bot_name, undo=undo))
    if not own and not shared:
        lines.append(texts("memory.none", bot=bot_name))
        if where:
            lines += ["", where]
        return "\n".join(lines)
    for entry in own:
        lines.append(texts("memory.own_title", bot=bot_name, persona=_persona(entry, texts)))
        distilled = _distilled(entry, labels)
        if distilled:
            lines.append(texts("memory.notes"))
            lines.extend(distilled)
        if entry.messages:
            lines.append(texts("memory.recent", n=len(entry.messages)))
            for message in entry.messages:
                speaker = message.speaker_name or (
                    bot_name if message.role == "assistant" else texts("memory.you")
                )
                content = discord.utils.escape_markdown(message.content.replace("\n", " "))
                lines.append(
                    texts(
                        "memory.message",
                        speaker=discord.utils.escape_markdown(speaker),
                        content=content,
                    )
                )
        lines.append(texts("memory.own_expires", when=_when(entry.expires_at)))
    for entry in shared:
        lines.append("")
        lines.append(texts("memory.shared_title", persona=_persona(entry, texts)))
        lines.extend(_distilled(entry, labels))
        lines.append(texts("memory.shared_expires", when=_when(entry.expires_at)))
    if where:
        lines += ["", where]
    if forget:
        lines.append("")
        lines.append(texts("memory.forget_hint", forget=forget))
    return "\n".join(lines)


# Channels named by ``describe_where``; the others are counted.
WHERE_LISTED = 10


def describe_where(channels: Sequence[str] | None, *, bot_name: str, texts: Texts = ENGLISH) -> str:
    """Where memory of this channel may appear: ``channels`` (mentions) of the server where
    it may be shown now, or None in a DM."""
    if channels is None:
        return texts("memory.where_dm")
    head = texts("memory.where_server", bot=bot_name)
    if not channels:
        return f"{head}\n{texts('memory.where_nowhere')}"
    listed = ", ".join(channels[:WHERE_LISTED])
    if len(channels) > WHERE_LISTED:
        listed = texts("memory.where_more", channels=listed, n=len(channels) - WHERE_LISTED)
    return f"{head}\n{texts('memory.where_now', channels=listed)}"


def describe_settings(
    settings: ServerSettings,
    max_categories: int,
    *,
    budget: int | None = None,
    language: str = "en",
    texts: Texts = ENGLISH,
    tool_tokens: int | None = None,
) -> str:
    """What ``/memory-settings show`` answers; ``budget``: the token budget in force;
    ``language``: the language the model reads here; ``tool_tokens``: the size of the
    tool's definition, which a budget below it leaves out."""
    state = texts("settings.on") if settings.enabled else texts("settings.off")
    limit = texts("settings.no_limit") if budget is None else f"{budget:,}"
    lines = [
        texts("settings.state", state=state),
        texts("settings.render_mode", mode=settings.render_mode),
        texts("settings.cadence", turns=settings.refresh_cadence),
        texts("settings.crude_count", count=settings.crude_message_count),
        texts("settings.leavers_purged" if settings.purge_leavers else "settings.leavers_kept"),
        texts("settings.token_budget", budget=limit),
        *(
            [texts("settings.budget_below_tool", tokens=f"{tool_tokens:,}")]
            if budget is not None and tool_tokens is not None and budget < tool_tokens
            else []
        ),
        texts(
            "settings.language",
            language=texts(f"language.{language}")
            if settings.language is not None
            else texts("settings.language_auto", language=texts(f"language.{language}")),
        ),
        texts("settings.categories", n=len(settings.categories), limit=max_categories),
    ]
    for category in settings.categories:
        description = discord.utils.escape_markdown(category.description) or texts(
            "settings.no_description"
        )
        lines.append(
            texts(
                "settings.category",
                label=discord.utils.escape_markdown(category.label),
                description=description,
            )
        )
    return "\n".join(lines)


# -- purges: the preview, the buttons, the answers ------------------------------------
def purge_buttons(texts: Texts = ENGLISH) -> tuple[str, str]:
    """The labels of a purge confirmation's buttons: (confirm, cancel)."""
    return texts("purge.confirm"), texts("purge.cancel")


def _entries(texts: Texts, count: int, *, bold: bool = False, shared: bool = False) -> str:
    shown = f"**{count}**" if bold else str(count)
    return texts.count("purge.shared_entries" if shared else "purge.entries", count, shown=shown)


def _share(texts: Texts, share: float, *, at_most: bool = False) -> str:
    """``share`` as a percentage; ``at_most``: the server was counted only far enough to
    tell the share is at most this (a purge of few of a large server's entries)."""
    if 0 < share < 0.01:
        return texts("purge.under_one_percent")
    return texts("purge.at_most", share=f"{share:.0%}") if at_most else f"{share:.0%}"


def _duration(texts: Texts, seconds: float) -> str:
    if seconds >= 120:
        return texts("duration.minutes", n=seconds / 60)
    return texts("duration.seconds", n=seconds)


def _rule(texts: Texts, erasure: str) -> str:
    return texts("purge.rule_complete" if erasure == "complete" else "purge.rule_direct")


def _shared_parts(texts: Texts, impact: PurgeImpact, here: int | None) -> str:
    """``N in this server (S% of what the bot remembers here); M elsewhere``."""
    if here is None:
        return texts("purge.shared_in_all", n=impact.shared)
    in_here = impact.shared_by_server.get(here, 0)
    parts = [
        texts(
            "purge.shared_here",
            n=in_here,
            share=_share(texts, impact.share_of(here), at_most=here in impact.distilled_at_least),
        )
        if in_here
        else texts("purge.shared_none_here")
    ]
    elsewhere = impact.shared - in_here
    if elsewhere:
        parts.append(texts("purge.shared_elsewhere", n=elsewhere))
    return texts("list.separator").join(parts)


def _shared_preview(texts: Texts, key: str, impact: PurgeImpact, here: int | None) -> str:
    """A purge preview's paragraph on the notes shared with others it would clear."""
    if not impact.shared:
        return texts("purge.preview_no_shared")
    return texts(
        key,
        entries=_entries(texts, impact.shared, bold=True, shared=True),
        rule=_rule(texts, impact.erasure),
        parts=_shared_parts(texts, impact, here),
    )


def describe_forget_preview(
    impact: PurgeImpact, *, here: int | None, seconds: float, texts: Texts = ENGLISH
) -> str:
    """What ``/memory forget`` shows before it erases anything; ``here``: the server it is
    used in (None in a DM)."""
    confirm, _ = purge_buttons(texts)
    shared = _shared_preview(texts, "forget.preview_shared", impact, here)
    return "\n".join(
        [
            texts("forget.preview_title"),
            texts("forget.preview_own", n=impact.own),
            texts("forget.preview_messages"),
            shared,
            texts("purge.preview_wait", confirm=confirm, within=_duration(texts, seconds)),
        ]
    )


def describe_forget_done(impact: PurgeImpact | None, *, texts: Texts = ENGLISH) -> str:
    """What ``/memory forget`` answers once the purge is durable (``impact`` None when the
    database could not confirm it yet)."""
    if impact is None:
        return texts("forget.done")
    return texts(
        "forget.done_counted",
        own=_entries(texts, impact.own),
        shared=_entries(texts, impact.shared, shared=True),
    )


def describe_purge_preview(
    impact: PurgeImpact,
    *,
    member: str,
    here: int,
    everywhere: bool,
    seconds: float,
    texts: Texts = ENGLISH,
) -> str:
    """What ``/purge-memory`` shows before it erases anything; ``member``: the purged
    user's mention; ``here``: the server it is used in."""
    confirm, _ = purge_buttons(texts)
    where = texts("purge.everywhere") if everywhere else texts("purge.in_this_server")
    shared = _shared_preview(texts, "purge.preview_shared", impact, here)
    return "\n".join(
        [
            texts("purge.preview_title", member=member, where=where),
            texts("purge.preview_own", n=impact.own),
            texts("purge.preview_messages", where=where),
            shared,
            texts("purge.preview_wait", confirm=confirm, within=_duration(texts, seconds)),
        ]
    )


def describe_purge_done(
    impact: PurgeImpact | None, *, member: str, everywhere: bool, texts: Texts = ENGLISH
) -> str:
    """What ``/purge-memory`` answers once the purge is durable (``impact`` None when the
    database could not confirm it yet)."""
    where = texts("purge.everywhere") if everywhere else texts("purge.in_this_server")
    if impact is None:
        return texts("purge.done", member=member, where=where)
    return texts(
        "purge.done_counted",
        member=member,
        where=where,
        own=_entries(texts, impact.own),
        shared=_entries(texts, impact.shared, shared=True),
    )


# What a confirmation says while it acts, once cancelled, and once nobody answered it in
# time, by what it confirms: a purge erases, a restore changes notes.
_CONFIRMATION_TEXTS = {
    "purge": ("purge.erasing", "purge.cancelled", "purge.expired"),
    "restore": ("restore.restoring", "restore.cancelled", "restore.expired"),
}
Confirmed = Literal["purge", "restore"]


def describe_acting(kind: Confirmed, texts: Texts = ENGLISH) -> str:
    """What a confirmation says while its purge or restore runs."""
    return texts(_CONFIRMATION_TEXTS[kind][0])


def describe_cancelled(kind: Confirmed, texts: Texts = ENGLISH) -> str:
    """What a confirmation says once cancelled: nothing done."""
    return texts(_CONFIRMATION_TEXTS[kind][1])


def describe_expired(kind: Confirmed, seconds: float, texts: Texts = ENGLISH) -> str:
    """What a confirmation says once nobody answered it in time: nothing done."""
    return texts(_CONFIRMATION_TEXTS[kind][2], within=_duration(texts, seconds))


def describe_purge_not_yours(texts: Texts = ENGLISH) -> str:
    """The answer to someone pressing a button of another person's confirmation."""
    return texts("purge.not_yours")


def describe_refusal(error: app_commands.CheckFailure, texts: Texts = ENGLISH) -> str:
    """A failed check in the reader's language (another cog's check: its own words): the
    answer to a command refused, and to its confirmation refused when pressed."""
    if isinstance(error, MissingServerPermission):
        key = f"permission.{error.permission}"
        permission = texts(key) if texts.has(key) else error.permission
        return texts("error.permission", permission=permission)
    if isinstance(error, NotOwner):
        if error.what == "this":
            return texts("error.owner_only_this")
        return texts("error.owner_only", what=error.what)
    if isinstance(error, app_commands.NoPrivateMessage):
        return texts("error.server_only")
    return str(error) or texts("error.not_here")


def describe_purge_answered(texts: Texts = ENGLISH) -> str:
    """The answer to a second press of a confirmation already answered."""
    return texts("purge.answered")


def describe_recent_purges(recent: RecentPurges, *, texts: Texts = ENGLISH) -> str:
    """What ``/memory-settings show`` says of the server's recent purges."""
    window = texts("duration.hours", n=recent.window_seconds / 3600)
    if not recent.purges:
        return texts("recent.none", window=window)
    text = texts(
        "recent.some",
        window=window,
        purges=recent.purges,
        entries=_entries(texts, recent.shared, shared=True),
    )
    if recent.over_threshold:
        text += texts(
            "recent.over",
            over=recent.over_threshold,
            share=_share(texts, recent.threshold),
        )
    return text + texts("recent.end")


# -- note history ---------------------------------------------------------------------------
# Versions shown per entry, and changed sentences per version: a reply stays readable.
HISTORY_SHOWN = 4
CHANGES_SHOWN = 6


def _who(version: NoteVersion, texts: Texts) -> str:
    return texts("history.operator") if version.written_by is None else f"<@{version.written_by}>"


def describe_history(
    sections: Sequence[tuple[str, Sequence[NoteVersion]]], texts: Texts = ENGLISH
) -> str:
    """The note history ``/memory show history:True`` adds: per entry (its title, its
    versions newest first), each version's number, when and whose turn wrote it, and what
    it changed of the one before (removed sentences are what a restore brings back)."""
    lines: list[str] = []
    for title, versions in sections:
        lines += ["", title]
        if len(versions) < 2:
            lines.append(texts("history.none"))
            continue
        for at, version in enumerate(versions[:HISTORY_SHOWN]):
            key = "history.current" if version.current else "history.version"
            lines.append(
                texts(
                    key,
                    version=version.version,
                    when=f"<t:{int(version.written_at)}:R>",
                    who=_who(version, texts),
                )
            )
            if version.restored_from is not None:
                lines.append(texts("history.restored_from", version=version.restored_from))
            if at + 1 < len(versions):
                changed = changes(version, versions[at + 1])
                for line in changed[:CHANGES_SHOWN]:
                    lines.append(f"`{line[0]}` {discord.utils.escape_markdown(line[2:])}")
                if len(changed) > CHANGES_SHOWN:
                    lines.append(texts("history.more", n=len(changed) - CHANGES_SHOWN))
            else:
                lines.append(_quoted(version_text(version)))
    return "\n".join(lines)


def describe_restore_preview(
    version: NoteVersion, *, shared: bool, seconds: float, texts: Texts = ENGLISH
) -> str:
    """What a restore will bring back, above its Confirm / Cancel."""
    whose = texts("history.shared_notes") if shared else texts("history.own_notes")
    head = texts("restore.preview", version=version.version, whose=whose)
    tail = texts("restore.expires", seconds=int(seconds))
    # One message: the quote is cut to what Discord takes beside the two lines.
    room = MESSAGE_LIMIT - len(head) - len(tail) - 2
    return "\n".join([head, truncate(_quoted(version_text(version)), room), tail])


def describe_restore_done(restored: bool, version: int, texts: Texts = ENGLISH) -> str:
    """The answer once a restore ran: done, or the version was erased (or the notes
    changed) meanwhile."""
    return texts("restore.done" if restored else "restore.gone", version=version)


def describe_restore_current(version: int, texts: Texts = ENGLISH) -> str:
    """The answer to restoring the version that is already the current notes."""
    return texts("restore.current", version=version)


def describe_restore_pending(at_risk: bool, version: int, texts: Texts = ENGLISH) -> str:
    """The answer to a restore the database could not take yet: retried and kept for a
    restart, or (``at_risk``) not even saved for later."""
    return texts("restore.at_risk" if at_risk else "restore.pending", version=version)
