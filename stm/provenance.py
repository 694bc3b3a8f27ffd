"""What a turn's prompt showed from memory: whom its upgrade credits, which deletions overtake it.

A summary is a distillation of everything the model saw, so its contributors are
everyone whose words the prompt could show, and a deletion of any of it during
the turn means the turn's summary and capture could bring the deleted words back.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Shown"]


@dataclass(slots=True)
class Shown:
    """The channels whose memory a turn's prompt showed (its own included), and the users
    whose words it showed (its own user included)."""

    channels: set[int] = field(default_factory=set)
    users: set[int] = field(default_factory=set)

    @classmethod
    def own(cls, user_id: int, channel_id: int) -> Shown:
        """What any turn shows the model: its own channel and its user's words."""
        return cls({channel_id}, {user_id})

    def add_window(self, turn_users: Iterable[int], authors: Iterable[int | None]) -> None:
        """Credit the turn users and the authors of crude messages that were shown."""
        self.users.update(turn_users)
        self.users.update(a for a in authors if a is not None)
