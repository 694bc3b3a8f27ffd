"""Purges that clear much of a server's notes, and members who keep doing it: a sliding window.

A purge clears the notes of shared entries that may hold the purged user's words
(``_lineage.py``), so one member's purge can take a large part of what the bot
remembers of a server, and the same member purging again and again can keep it
cleared. :class:`PurgeWatch` records, per server, what each purge cleared, and says
when the server's admins should hear of it (a :class:`PurgeAlert`):

- a purge that cleared the notes of more than ``SHARE_THRESHOLD`` of the server's
  distilled entries (as they were just before it), at least ``SHARE_MINIMUM`` of them;
- a purge by a member whose purges cleared shared notes in that server
  ``REPEAT_LIMIT`` times or more within ``WINDOW_SECONDS`` (this one included).

It also answers what a server's admins ask: the purges of the last window there
(:class:`RecentPurges`). The counts are this process's (a purge run by another
process is counted there). Pure: the time is passed in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "REPEAT_LIMIT",
    "SHARE_MINIMUM",
    "SHARE_THRESHOLD",
    "WINDOW_SECONDS",
    "PurgeAlert",
    "PurgeWatch",
    "RecentPurges",
    "describe_alert",
]

# More than a quarter of a server's distilled memory gone in one purge is not one
# member's own footprint any more (under ``direct``, a typical member's purge clears far
# less); a server holding only a few entries is left out: losing two of three is noise.
SHARE_THRESHOLD = 0.25
SHARE_MINIMUM = 5
# Three purges clearing shared notes in a day, by one member in one server: the notes
# are written again within hours of normal talk, so more than that keeps them cleared.
REPEAT_LIMIT = 3
WINDOW_SECONDS = 24 * 3600.0
# Records kept at most (the oldest go first): bounds memory whatever the traffic.
RECORDS_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class PurgeAlert:
    """Why a purge should be seen: ``share`` (it cleared more than the threshold of the
    server's memory) or ``repeated`` (its member's purges keep clearing shared notes
    there). ``member`` asked for it; ``user_id`` was purged."""

    reason: Literal["share", "repeated"]
    server_id: int
    member: int
    user_id: int
    shared: int  # shared entries whose notes this purge cleared in the server
    distilled: int  # distilled entries the server held before it
    purges: int  # the member's purges that cleared shared notes there within the window
    shared_in_window: int  # the shared entries those purges cleared
    window_seconds: float

    @property
    def share(self) -> float:
        """The share (0 to 1) of the server's distilled entries this purge cleared."""
        return self.shared / self.distilled if self.distilled else 0.0


@dataclass(frozen=True, slots=True)
class RecentPurges:
    """A server's purges that cleared shared notes within the last ``window_seconds``:
    how many, how many shared entries they cleared, how many went over the threshold."""

    purges: int
    shared: int
    over_threshold: int
    window_seconds: float
    threshold: float


@dataclass(frozen=True, slots=True)
class _Record:
    at: float
    server_id: int
    member: int
    shared: int
    over: bool


class PurgeWatch:
    """Counts what purges clear per server over a sliding window; see the module."""

    def __init__(self, *, kept: int = RECORDS_KEPT) -> None:
        self._records: deque[_Record] = deque(maxlen=kept)

    def over(self, shared: int, distilled: int) -> bool:
        """True when clearing ``shared`` of ``distilled`` entries is over the threshold."""
        return shared >= SHARE_MINIMUM and shared > SHARE_THRESHOLD * distilled

    def record(
        self,
        now: float,
        *,
        member: int,
        user_id: int,
        shared_by_server: Mapping[int | None, int],
        distilled_by_server: Mapping[int | None, int],
    ) -> list[PurgeAlert]:
        """One purge asked for by ``member``: what it cleared per server; what to warn of."""
        self._prune(now)
        alerts: list[PurgeAlert] = []
        for server_id, shared in sorted(
            (s, n) for s, n in shared_by_server.items() if s is not None and n > 0
        ):
            distilled = max(distilled_by_server.get(server_id, 0), shared)
            over = self.over(shared, distilled)
            self._records.append(_Record(now, server_id, member, shared, over))
            mine = [r for r in self._records if r.server_id == server_id and r.member == member]
            reasons: list[Literal["share", "repeated"]] = []
            if over:
                reasons.append("share")
            if len(mine) >= REPEAT_LIMIT:
                reasons.append("repeated")
            alerts.extend(
                PurgeAlert(
                    reason,
                    server_id,
                    member,
                    user_id,
                    shared,
                    distilled,
                    len(mine),
                    sum(r.shared for r in mine),
                    WINDOW_SECONDS,
                )
                for reason in reasons
            )
        return alerts

    def recent(self, server_id: int, now: float) -> RecentPurges:
        """The server's purges that cleared shared notes within the window before ``now``."""
        self._prune(now)
        here = [r for r in self._records if r.server_id == server_id]
        return RecentPurges(
            purges=len(here),
            shared=sum(r.shared for r in here),
            over_threshold=sum(r.over for r in here),
            window_seconds=WINDOW_SECONDS,
            threshold=SHARE_THRESHOLD,
        )

    def _prune(self, now: float) -> None:
        records = self._records
        while records and records[0].at <= now - WINDOW_SECONDS:
            records.popleft()


def describe_alert(alert: PurgeAlert, member: str = "", server: str = "") -> str:
    """The alert as one log line; ``member`` and ``server`` name them where known."""
    who = f"member {alert.member}" + (f" ({member})" if member else "")
    where = f"server {alert.server_id}" + (f" ({server})" if server else "")
    whom = "their own memory" if alert.user_id == alert.member else f"user {alert.user_id}"
    hours = f"{alert.window_seconds / 3600:g} h"
    if alert.reason == "share":
        return (
            f"a purge of {whom} by {who} cleared the notes of {alert.shared} of the "
            f"{alert.distilled} distilled entries of {where} ({alert.share:.0%}); "
            f"their purges there in the last {hours}: {alert.purges}, "
            f"{alert.shared_in_window} shared entries cleared"
        )
    return (
        f"{who} keeps clearing the memory of {where}: {alert.purges} purges in the last "
        f"{hours} cleared the notes of {alert.shared_in_window} shared entries "
        f"(this one, of {whom}: {alert.shared} of {alert.distilled})"
    )
