"""Who can read a channel, from discord.py's cache: the cog's ``stm.Audience``.

Memory of channel X may be shown in a prompt built in channel Y only when everyone who can
view Y can view X. Deciding that member by member would cost a server's member count per
prompt, so it is decided from the two channels' permission overwrites and the roles they
name, for every set of roles a member could hold:

- the owner and members with Administrator see every channel, so they never stand in the
  way; a role with Administrator is left out (whoever holds it sees everything);
- a role no overwrite of X or Y names counts as one that may grant View Channel at the
  server level (more possible members, never fewer);
- a member named by an overwrite of X or Y is checked with their overwrites, for every
  set of roles they could hold.

So the answer is exact for the rule "everyone who could view Y, whatever roles they hold,
can view X", and sound for the actual members: it refuses only where some set of roles
would see Y and not X. Public channels, identical overwrites (channels synced to one
category), and a staff channel into a smaller staff channel pass.

Threads: a public thread (a forum post included) is read by whoever reads its parent. A
private thread is read by fewer (its members and those who manage threads), so memory of
other channels may enter it as it may enter its parent, and its own memory is recalled
nowhere else. Voice and stage channels' text chat follows the channel's overwrites.
Anything not in the cache (a channel, its parent, a role an overwrite names, the server)
is not judged: nothing is recalled.

The decision comes from this process's cache, which discord.py keeps from the gateway
events of this process's shards (the shard that serves a server also brings its prompts).
Each decision is remembered with the objects it was read from, and checked against them
at every use: a channel's overwrites list (discord.py replaces it on every channel
update), the permissions of every role the decision read, and the @everyone role's. A
change is seen by the very next prompt, before any listener runs, and nothing is kept
across a restart.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import discord

__all__ = ["DiscordAudience", "channel_audience", "may_view_from"]

VIEW = 1 << 10  # View Channel (read_messages)
ADMINISTRATOR = 1 << 3
_ROLE, _MEMBER = 0, 1
# Decisions remembered per process; when full, they are forgotten at once (one dict of
# pairs of channels that prompts asked about, bounded whatever the servers' sizes).
MAX_DECISIONS = 65_536


@dataclass(frozen=True, slots=True, eq=False)
class ChannelAudience:
    """Who can view one channel with overwrites, as read from discord.py's objects."""

    channel: Any  # the guild channel whose overwrites these are
    overwrites: list[Any]  # that channel's ``_overwrites`` list, as read
    everyone: Any  # the server's @everyone role
    everyone_perms: int  # its permissions, as read
    roles: tuple[tuple[Any, int], ...]  # each role the overwrites name, and its permissions
    # The view bits: @everyone's overwrite (allow, deny); per role id, per member id.
    everyone_ow: tuple[bool, bool]
    role_ow: dict[int, tuple[bool, bool]]
    member_ow: dict[int, tuple[bool, bool]]
    role_perms: dict[int, int]

    def current(self, channel: Any) -> bool:
        """True while nothing it was read from has changed."""
        if channel is not self.channel or channel._overwrites is not self.overwrites:
            return False
        if self.everyone._permissions != self.everyone_perms:
            return False
        for role, perms in self.roles:  # noqa: SIM110 (every prompt: no generator)
            if role._permissions != perms:
                return False
        return True


def channel_audience(channel: Any) -> ChannelAudience | None:
    """The audience of a guild channel with overwrites (not a thread), or None when it
    cannot be judged (no @everyone role, a role an overwrite names is not cached)."""
    guild = channel.guild
    everyone = guild.get_role(guild.id)
    if everyone is None or getattr(guild, "unavailable", False):
        return None
    overwrites = channel._overwrites
    everyone_ow = (False, False)
    role_ow: dict[int, tuple[bool, bool]] = {}
    member_ow: dict[int, tuple[bool, bool]] = {}
    roles: list[tuple[Any, int]] = []
    role_perms: dict[int, int] = {}
    for ow in overwrites:
        bits = (bool(ow.allow & VIEW), bool(ow.deny & VIEW))
        if ow.type == _MEMBER:
            member_ow[ow.id] = bits
        elif ow.id == guild.id:
            everyone_ow = bits
        else:
            role = guild.get_role(ow.id)
            if role is None:
                return None
            role_ow[ow.id] = bits
            roles.append((role, role._permissions))
            role_perms[ow.id] = role._permissions
    return ChannelAudience(
        channel,
        overwrites,
        everyone,
        everyone._permissions,
        tuple(roles),
        everyone_ow,
        role_ow,
        member_ow,
        role_perms,
    )


def _views(
    base: bool,
    allowed: bool,
    denied: bool,
    member: tuple[bool, bool],
    everyone_ow: tuple[bool, bool],
) -> bool:
    """discord.py's ``permissions_for`` for View Channel, on one member's bits."""
    view = (base and not everyone_ow[1]) or everyone_ow[0]
    view = (view and not denied) or allowed
    return (view and not member[1]) or member[0]


def may_view_from(y: ChannelAudience, x: ChannelAudience) -> bool:
    """True when whoever could view ``y``, with any set of roles, can view ``x``."""
    if y is x:
        return True
    everyone_perms = x.everyone_perms
    if everyone_perms & ADMINISTRATOR:
        return True
    everyone_views = bool(everyone_perms & VIEW)
    # Each role named by either channel's overwrites, as the bits it brings a member:
    # (grants View Channel on the server, allows x, denies x, allows y, denies y). Any
    # other role brings at most the first bit. Administrator roles are left out.
    kinds = {(True, False, False, False, False)}
    no = (False, False)
    for role_id in x.role_ow.keys() | y.role_ow.keys():
        perms = x.role_perms.get(role_id)
        if perms is None:
            perms = y.role_perms[role_id]
        if perms & ADMINISTRATOR:
            continue
        ax, dx = x.role_ow.get(role_id, no)
        ay, dy = y.role_ow.get(role_id, no)
        kinds.add((bool(perms & VIEW), ax, dx, ay, dy))
    # What sets of such roles can bring together: the OR of any subset (at most 32).
    reach = {(False, False, False, False, False)}
    for kind in kinds:
        reach |= {tuple(a or b for a, b in zip(seen, kind, strict=True)) for seen in reach}  # type: ignore[misc]
    pairs = {(no, no)}
    for member_id in x.member_ow.keys() | y.member_ow.keys():
        pairs.add((x.member_ow.get(member_id, no), y.member_ow.get(member_id, no)))
    for base, ax, dx, ay, dy in reach:
        base = base or everyone_views
        for mx, my in pairs:
            if _views(base, ay, dy, my, y.everyone_ow) and not _views(
                base, ax, dx, mx, x.everyone_ow
            ):
                return False
    return True


class DiscordAudience:
    """``stm.Audience`` from a discord.py client's cache (see the module's docstring)."""

    def __init__(self, client: discord.Client) -> None:
        self._client = client
        self._channels: dict[int, ChannelAudience] = {}
        self._decisions: dict[tuple[int, int], tuple[ChannelAudience, ChannelAudience, bool]] = {}

    def may_recall(self, server_id: int, into: int, from_: Sequence[int]) -> Collection[int]:
        """The channels of ``from_`` everyone who can view ``into`` can view, now."""
        guild = self._client._connection._guilds.get(server_id)
        if guild is None:
            return ()
        target = self._resolve(guild, into, into=True)
        if target is None:
            return ()
        allowed: set[int] = set()
        decisions = self._decisions
        for channel_id in from_:
            source = self._resolve(guild, channel_id, into=False)
            if source is None:
                continue
            if source is target:
                allowed.add(channel_id)
                continue
            pair = (target.channel.id, source.channel.id)
            known = decisions.get(pair)
            if known is not None and known[0] is target and known[1] is source:
                if known[2]:
                    allowed.add(channel_id)
                continue
            decided = may_view_from(target, source)
            if len(decisions) >= MAX_DECISIONS:
                decisions.clear()
            decisions[pair] = (target, source, decided)
            if decided:
                allowed.add(channel_id)
        return allowed

    def _resolve(self, guild: Any, channel_id: int, *, into: bool) -> ChannelAudience | None:
        """The audience that bounds a channel's readers: its own, or for a thread its
        parent's (None for a private thread's own memory, which stays in it)."""
        channel = guild._channels.get(channel_id)
        if channel is None:
            thread = guild._threads.get(channel_id)
            if thread is None:
                return None
            if thread.type is discord.ChannelType.private_thread and not into:
                return None
            channel = guild._channels.get(thread.parent_id)
            if channel is None:
                return None
        if not hasattr(channel, "_overwrites"):
            return None
        held = self._channels.get(channel.id)
        if held is not None and held.current(channel):
            return held
        made = channel_audience(channel)
        if made is None:
            self._channels.pop(channel.id, None)
            return None
        if len(self._channels) >= MAX_DECISIONS:
            self._channels.clear()
        self._channels[channel.id] = made
        return made
