"""Who may read what: the host says, at each prompt, which channels' memory it may show.

The library knows no platform. Which people can read a channel is the platform's fact, and
it changes (a channel locked, a role edited), so it is not copied into the memory at
capture and trusted later: a host that can tell gives an ``Audience``, and every prompt
asks it which of the candidate channels may be shown there. A host without one keeps the
flag its turns carried at capture (``TurnContext.channel_is_private``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Admit", "Audience", "admitter"]

log = logging.getLogger("stm")

# What the cache's recall is given for one prompt: the candidate channels, newest first,
# in; those that may be shown, out.
Admit = Callable[[Sequence[int]], Collection[int]]


@runtime_checkable
class Audience(Protocol):
    """The host's judgement of who can read which channel (the cog's: Discord's permissions).

    ``may_recall(server_id, into, from_)`` returns the channels of ``from_`` whose memory may
    be shown in a prompt built in channel ``into`` of server ``server_id``: those that
    everyone who can read ``into`` can read too, judged now. A channel it cannot judge
    (not known, a permission it cannot read) must be left out. It is called while a prompt
    is built, with no await in between, so it must answer from what the host holds in
    memory; it is asked once for the newest candidates (as many as the prompt shows) and
    again, for more at once, only when it refused some of them. Same-channel memory and
    DMs never ask: a DM is never recalled and never recalls."""

    def may_recall(self, server_id: int, into: int, from_: Sequence[int]) -> Collection[int]:
        """The channels of ``from_`` whose memory may be shown in channel ``into``."""
        ...


def admitter(audience: Audience, server_id: int, into: int) -> Admit:
    """``audience`` asked about one prompt: its answer kept to what was asked, and a failure
    (logged) admitting nothing, since not knowing must not show a channel's memory."""

    def admit(candidates: Sequence[int]) -> Collection[int]:
        try:
            allowed = audience.may_recall(server_id, into, candidates)
        except Exception:
            log.exception("the audience failed for channel %s: nothing recalled", into)
            return ()
        if type(allowed) is not set and type(allowed) is not frozenset:
            try:
                allowed = set(allowed)
            except TypeError:
                log.error("the audience answered %r, not channel ids", type(allowed).__name__)
                return ()
        return allowed

    return admit
