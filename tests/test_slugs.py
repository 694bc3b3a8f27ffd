"""The slug rule for category property names."""

from __future__ import annotations

import pytest

from stm._slugs import slugify, slugs_for


@pytest.mark.parametrize(
    ("label", "slug"),
    [
        ("Current Topic", "current_topic"),
        ("  Mood / Tone!! ", "mood_tone"),
        ("3 things", "c_3_things"),
        ("***", "field"),
        ("", "field"),
        ("Café Plans", "cafe_plans"),
        ("a__b", "a_b"),
        ("x" * 80, "x" * 48),
    ],
)
def test_slugify(label: str, slug: str) -> None:
    """Lowercase, non-word runs to _, only [a-z0-9_], c_ before a digit, 48 max, else field."""
    assert slugify(label) == slug


def test_collisions_get_numbered_suffixes() -> None:
    """Labels that slug alike become name, name_2, name_3."""
    assert slugs_for(["Topic", "topic", "TOPIC!", "Mood"]) == [
        "topic",
        "topic_2",
        "topic_3",
        "mood",
    ]


def test_long_collisions_stay_within_the_limit() -> None:
    """A suffixed slug is still at most 48 characters."""
    slugs = slugs_for(["y" * 60, "y" * 70])
    assert slugs[0] != slugs[1]
    assert all(len(s) <= 48 for s in slugs)
