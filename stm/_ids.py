"""Ids and names at the public boundary: Discord snowflakes and one-line display names.

A value the store cannot hold (an id past 64 bits, a lone surrogate) must be
refused where it enters, not when its write fails: by then it is queued, and
whatever is queued behind it waits.
"""

from __future__ import annotations

__all__ = [
    "ID_LIMIT",
    "MAX_NAME_LENGTH",
    "check_bool",
    "check_id",
    "check_optional_id",
]

# Discord snowflakes are unsigned 64-bit; SQLite and PostgreSQL integers are signed.
ID_LIMIT = 2**63
# Discord's own limit for channel and server names; display names are shorter.
MAX_NAME_LENGTH = 100


def check_id(value: object, what: str) -> int:
    """``value`` if it is an int in ``0 <= id < 2**63``; ValueError naming ``what`` otherwise."""
    # type() rather than isinstance(): True is an int, and not an id.
    if type(value) is not int or not 0 <= value < ID_LIMIT:
        raise ValueError(f"{what} must be an integer id in [0, 2**63), not {value!r:.40}")
    return value


def check_optional_id(value: object, what: str) -> int | None:
    """``check_id``, with None allowed."""
    return None if value is None else check_id(value, what)


def check_bool(value: object, what: str) -> bool:
    """``value`` if it is a bool; ValueError naming ``what`` otherwise."""
    if type(value) is not bool:
        raise ValueError(f"{what} must be True or False, not {value!r:.40}")
    return value
