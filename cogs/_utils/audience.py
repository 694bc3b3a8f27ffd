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
Each channel's reading is remembered with the objects it was read from, and checked
against them at every use: the channel object, its overwrites list (discord.py replaces
it on every channel update), the permissions of every role its overwrites name, and the
@everyone role's; a server Discord marks unavailable recalls nothing. Decisions are
remembered per pair of readings' values (pure, so never stale). A change is seen by the
very next prompt, before any listener runs, and nothing is kept across a restart.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
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
# ``shown_in`` looks at this many of a server's channels at most (Discord allows 500, and
# threads beside them).
SHOWN_IN_SCAN = 1000


# What decides who views a channel, as plain values: (@everyone's server-level View and
# Administrator bits, @everyone's overwrite, each named role's overwrite with its own View
# and Administrator bits, each named member's overwrite). Channels synced to one category
# have the same; decisions are remembered per pair of these, not per pair of channels.
Signature = tuple[
    tuple[bool, bool],
    tuple[bool, bool],
    frozenset[tuple[int, bool, bool, bool, bool]],
    frozenset[tuple[int, bool, bool]],
]


@dataclass(frozen=True, slots=True, eq=False)
class ChannelAudience:
    """Who can view one channel with overwrites, as read from discord.py's objects."""

    channel: Any  # the guild channel whose overwrites these are
    overwrites: list[Any]  # that channel's ``_overwrites`` list, as read
    everyone: Any  # the server's @everyone role
    everyone_perms: int  # its permissions, as read
    roles: tuple[tuple[Any, int], ...]  # each role the overwrites name, and its permissions
    signature: Signature
    number: int  # the signature's number in the ``DiscordAudience`` that read it
    # Whoever is in the server can view it (whatever their roles and overwrites).
    everyone_views: bool

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


def channel_audience(
    channel: Any, number: Callable[[Signature], int] = lambda signature: 0
) -> ChannelAudience | None:
    """The audience of a guild channel with overwrites (not a thread), or None when it
    cannot be judged (no @everyone role, a role an overwrite names is not cached)."""
    guild = channel.guild
    everyone = guild.get_role(guild.id)
    if everyone is None or getattr(guild, "unavailable", False):
        return None
    overwrites = channel._overwrites
    everyone_ow = (False, False)
    role_ow: list[tuple[int, bool, bool, bool, bool]] = []
    member_ow: list[tuple[int, bool, bool]] = []
    roles: list[tuple[Any, int]] = []
    for ow in overwrites:
        allow, deny = bool(ow.allow & VIEW), bool(ow.deny & VIEW)
        if ow.type == _MEMBER:
            member_ow.append((ow.id, allow, deny))
        elif ow.id == guild.id:
            everyone_ow = (allow, deny)
        else:
            role = guild.get_role(ow.id)
            if role is None:
                return None
            perms = role._permissions
            role_ow.append((ow.id, bool(perms & VIEW), bool(perms & ADMINISTRATOR), allow, deny))
            roles.append((role, perms))
    base = everyone._permissions
    server = (bool(base & VIEW), bool(base & ADMINISTRATOR))
    signature = (server, everyone_ow, frozenset(role_ow), frozenset(member_ow))
    return ChannelAudience(
        channel,
        overwrites,
        everyone,
        base,
        tuple(roles),
        signature,
        number(signature),
        _everyone_views(signature),
    )


def _everyone_views(signature: Signature) -> bool:
    """True when every member, whatever their roles, can view a channel of ``signature``."""
    (views, admin), (allowed, denied), roles, members = signature
    if admin:
        return True
    if any(deny and not allow for _, _, _, allow, deny in roles):
        return False
    if any(deny and not allow for _, allow, deny in members):
        return False
    return allowed or (views and not denied)


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


def may_view_from(y: Signature, x: Signature) -> bool:
    """True when whoever could view a channel of signature ``y``, with any set of roles,
    can view one of signature ``x`` (of the same server)."""
    if y == x:
        return True
    (everyone_views, admin), x_everyone, x_roles, x_members = x
    if admin:
        return True
    _, y_everyone, y_roles, y_members = y
    no = (False, False)
    # Each role named by either channel's overwrites, as the bits it brings a member:
    # (grants View Channel on the server, allows x, denies x, allows y, denies y). Any
    # other role brings at most the first bit. Administrator roles are left out: whoever
    # holds one views every channel.
    on_x = {r: (v, a, allow, deny) for r, v, a, allow, deny in x_roles}
    on_y = {r: (v, a, allow, deny) for r, v, a, allow, deny in y_roles}
    kinds = {(True, False, False, False, False)}
    for role_id in on_x.keys() | on_y.keys():
        view, role_admin, ax, dx = on_x.get(role_id) or (*on_y[role_id][:2], False, False)
        if role_admin:
            continue
        ay, dy = on_y[role_id][2:] if role_id in on_y else no
        kinds.add((view, ax, dx, ay, dy))
    # What sets of such roles can bring together: the OR of any subset (at most 32).
    reach = {(False, False, False, False, False)}
    for kind in kinds:
        reach |= {tuple(a or b for a, b in zip(seen, kind, strict=True)) for seen in reach}  # type: ignore[misc]
    # Members named by an overwrite of either, with their own bits; anyone else has none.
    member_x = {m: (allow, deny) for m, allow, deny in x_members}
    member_y = {m: (allow, deny) for m, allow, deny in y_members}
    pairs = {(no, no)}
    for member_id in member_x.keys() | member_y.keys():
        pairs.add((member_x.get(member_id, no), member_y.get(member_id, no)))
    for base, ax, dx, ay, dy in reach:
        base = base or everyone_views
        for mx, my in pairs:
            if _views(base, ay, dy, my, y_everyone) and not _views(base, ax, dx, mx, x_everyone):
                return False
    return True


class DiscordAudience:
    """``stm.Audience`` from a discord.py client's cache (see the module's docstring)."""

    def __init__(self, client: discord.Client) -> None:
        self._client = client
        # Its connection state, whose dict of servers is made anew at every READY.
        self._state: Any = client._connection
        self._channels: dict[int, ChannelAudience] = {}
        # Each signature seen, as a small number, and the decisions by pair of them: pure
        # values, true for as long as they are kept.
        self._numbers: dict[Signature, int] = {}
        self._decisions: dict[tuple[int, int], bool] = {}
        self._counter = itertools.count()

    def may_recall(self, server_id: int, into: int, from_: Sequence[int]) -> Collection[int]:
        """The channels of ``from_`` everyone who can view ``into`` can view, now."""
        guild = self._state._guilds.get(server_id)
        if guild is None or guild.unavailable:
            return ()  # not known, or in an outage: its changes do not reach the cache
        channels, held = guild._channels, self._channels
        # Each channel as it was last read, if nothing it was read from has changed since.
        target = held.get(into)
        if target is None or not target.current(channels.get(into)):
            target = self._resolve(guild, into, into=True)
            if target is None:
                return ()
        allowed: set[int] = set()
        decisions = self._decisions
        wanted = target.number
        for channel_id in from_:
            source = held.get(channel_id)
            if source is None or not source.current(channels.get(channel_id)):
                source = self._resolve(guild, channel_id, into=False)
                if source is None:
                    continue
            if source.everyone_views or source.number == wanted:
                allowed.add(channel_id)
                continue
            pair = (wanted, source.number)
            decided = decisions.get(pair)
            if decided is None:
                decided = may_view_from(target.signature, source.signature)
                if len(decisions) >= MAX_DECISIONS:
                    decisions.clear()
                decisions[pair] = decided
            if decided:
                allowed.add(channel_id)
        return allowed

    def shown_in(self, server_id: int, channel_id: int) -> list[int]:
        """The server's other channels and threads (at most ``SHOWN_IN_SCAN`` looked at)
        whose prompts may show ``channel_id``'s memory now: for ``/memory show``."""
        guild = self._state._guilds.get(server_id)
        if guild is None:
            return []
        places = itertools.islice(
            itertools.chain(guild._channels.values(), guild._threads.values()), SHOWN_IN_SCAN
        )
        return [
            place.id
            for place in places
            if place.id != channel_id
            and not isinstance(place, discord.CategoryChannel)
            and channel_id in self.may_recall(server_id, place.id, (channel_id,))
        ]

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
        made = channel_audience(channel, self._number)
        if made is None:
            self._channels.pop(channel.id, None)
            return None
        if len(self._channels) >= MAX_DECISIONS:
            self._channels.clear()
        self._channels[channel.id] = made
        return made

    def _number(self, signature: Signature) -> int:
        """The number of ``signature`` (a new one when it was never seen, or forgotten)."""
        numbers = self._numbers
        number = numbers.get(signature)
        if number is None:
            if len(numbers) >= MAX_DECISIONS:
                # Forgotten together (numbers are never given twice).
                numbers.clear()
                self._decisions.clear()
                self._channels.clear()
            number = numbers[signature] = next(self._counter)
        return number
