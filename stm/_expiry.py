"""The expiry rule, in one place: for the cache, the facade's reads and the store's SQL.

An entry expires once it has been inactive for its TTL: the summary TTL if it
holds distilled content (a summary or categories), else the crude TTL. It is
expired at the TTL itself. The store is given the rule as two thresholds
(``now - TTL``): a row is expired when its ``updated_at`` is at or before the
threshold of its kind. ``EXPIRED_SQL`` is that same test written as SQL; a test
checks the two agree on every row.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DISTILLED_SQL",
    "EXPIRED_SQL",
    "HOUR",
    "Expiry",
    "Thresholds",
    "expired_sql",
    "row_expired",
]

HOUR = 3600.0


class Thresholds(NamedTuple):
    """Rows last active at or before these times (epoch seconds) are expired."""

    crude_before: float
    summary_before: float


class Expiry(NamedTuple):
    """The TTLs in seconds."""

    crude_ttl: float
    summary_ttl: float

    @classmethod
    def hours(cls, crude_ttl_hours: float, summary_ttl_hours: float) -> Expiry:
        """TTLs given in hours, as the settings give them."""
        return cls(crude_ttl_hours * HOUR, summary_ttl_hours * HOUR)

    def expires_at(self, updated_at: float, distilled: bool) -> float:
        """When an entry last active at ``updated_at`` expires if untouched."""
        return updated_at + (self.summary_ttl if distilled else self.crude_ttl)

    def expired(self, updated_at: float, distilled: bool, now: float) -> bool:
        """True once an entry last active at ``updated_at`` has been inactive for its TTL."""
        # The same arithmetic as ``thresholds`` and ``row_expired``, without building the
        # thresholds: the cache asks this for several entries on every turn.
        return updated_at <= now - (self.summary_ttl if distilled else self.crude_ttl)

    def thresholds(self, now: float) -> Thresholds:
        """The rule at ``now`` as the store applies it."""
        return Thresholds(now - self.crude_ttl, now - self.summary_ttl)


def row_expired(updated_at: float, distilled: bool, thresholds: Thresholds) -> bool:
    """The rule on thresholds: what ``EXPIRED_SQL`` computes for one row."""
    return updated_at <= (thresholds.summary_before if distilled else thresholds.crude_before)


# A row holds distilled content when its summary is not empty or its categories (JSON) are.
DISTILLED_SQL = "(coalesce(summary, '') <> '' OR categories <> '{}')"


def expired_sql(crude: str = ":crude", summary: str = ":summary") -> str:
    """The rule as SQL, its thresholds spelled ``crude`` and ``summary`` (a parameter, with
    a cast where the dialect wants one): every store's spelling of ``EXPIRED_SQL``."""
    return (
        f"((updated_at <= {summary} AND {DISTILLED_SQL}) "
        f"OR (updated_at <= {crude} AND NOT {DISTILLED_SQL}))"
    )


EXPIRED_SQL = expired_sql()
