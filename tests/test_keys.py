"""Scope keys: the exact formats of the contract."""

from __future__ import annotations

import pytest

from stm._keys import ScopeKey, parse_key, server_key, turn_keys, user_key


def test_key_formats() -> None:
    """Persona suffix only when a persona is set."""
    assert user_key(1, 2) == "shortterm:user:1:2"
    assert user_key(1, 2, 3) == "shortterm:user:1:2:3"
    assert server_key(9, 2) == "shortterm:server:9:2"
    assert server_key(9, 2, 3) == "shortterm:server:9:2:3"


def test_server_turn_indexes_both_keys_and_dm_only_the_user_key() -> None:
    """In a server a turn writes the user and the server key; in a DM only the user key."""
    assert turn_keys(1, 2, 9, None) == ("shortterm:user:1:2", "shortterm:server:9:2")
    assert turn_keys(1, 2, None, 5) == ("shortterm:user:1:2:5", None)


def test_parse_round_trips() -> None:
    """A key parses back into its parts."""
    assert parse_key("shortterm:server:9:2:3") == ScopeKey("server", 9, 2, 3)
    assert str(parse_key("shortterm:user:1:2")) == "shortterm:user:1:2"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "shortterm:user:1",
        "shortterm:guild:1:2",
        "other:user:1:2",
        "shortterm:user:a:2",
        "shortterm:user:1:2:3:4",
        "shortterm:user:01:2",
    ],
)
def test_parse_refuses_anything_else(bad: str) -> None:
    """Malformed or non-canonical keys are refused."""
    with pytest.raises(ValueError, match="key"):
        parse_key(bad)
