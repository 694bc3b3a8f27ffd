"""RenderCache: rendered lines are reused only while what they show is unchanged."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from stm._cache import Entry, StoredMessage, Window
from stm._models import Category, ServerSettings
from stm._render import ENGLISH, RenderCache, other_channels_blocks

NOW = 1_700_000_000.0


def message(text: str, user: int = 1) -> StoredMessage:
    return StoredMessage("user", text, f"user{user}", user, NOW, user)


def entry(*texts: str) -> Entry:
    return Entry(
        key="shortterm:server:1:2",
        scope="server",
        server_id=1,
        user_id=None,
        channel_id=2,
        persona_id=None,
        messages=[message(t) for t in texts],
        updated_at=NOW,
    )


def render(e: Entry, cache: RenderCache | None, bot: str = "Bot") -> str:
    return "\n".join(b.text for b in other_channels_blocks([e], ServerSettings(), bot, NOW, cache))


def test_unchanged_entry_reuses_its_lines() -> None:
    """A second render of an unchanged entry returns the same text from the cache."""
    cache = RenderCache()
    e = entry("one", "two")
    assert render(e, cache) == render(e, cache) == render(e, None)
    assert len(cache) == 1


def test_changes_are_rendered() -> None:
    """An appended message, a purged one, a summary and a new bot name all show at once."""
    cache = RenderCache()
    e = entry("one", "two")
    render(e, cache)
    e.messages += (message("three"),)
    assert "three" in render(e, cache)
    e.messages = Window([m for m in e.messages if m.content != "two"], first=10)
    assert "two" not in render(e, cache)
    e.summary = "SUMMARY-NOW"
    assert "SUMMARY-NOW" in render(e, cache)
    reply = entry()
    reply.messages += (StoredMessage("assistant", "a reply", "", None, NOW, 1),)
    assert '> Bot: "a reply"' in render(reply, cache)
    assert '> Other-Bot: "a reply"' in render(reply, cache, bot="Other-Bot")


def test_cache_is_bounded() -> None:
    """Past its size the least recently rendered entries are dropped."""
    cache = RenderCache(max_entries=2)
    for n in range(5):
        e = entry(f"m{n}")
        e.key = f"shortterm:server:1:{n}"
        render(e, cache)
    assert len(cache) == 2


Change = Callable[[Entry], None]
CHANGES: dict[str, Change] = {
    "message added": lambda e: setattr(
        e, "messages", Window([*e.messages, message(f"new {len(e.messages)}", 2)], e.messages.first)
    ),
    "window packed": lambda e: setattr(e, "messages", e.messages.packed()),
    "window moved": lambda e: e.remember((message("moved in", 3),), 4),
    "window moved by a turn": lambda e: e.remember((message("a", 4), message("b", 4)), 5),
    "oldest message's user purged": lambda e: setattr(
        e, "messages", e.messages.without(e.messages[0].turn_user_id) if e.messages else e.messages
    ),
    "summary set": lambda e: setattr(e, "summary", f"SUMMARY {e.revision}"),
    "summary cleared": lambda e: setattr(e, "summary", None),
    "categories set": lambda e: setattr(e, "categories", {"plans": "PLANS", "mood": "calm"}),
    # The library replaces categories; a host that changes a held dict in place is seen too.
    "category changed in place": lambda e: (
        e.categories.update(plans="CHANGED IN PLACE") if isinstance(e.categories, dict) else None
    ),
    "categories cleared": lambda e: setattr(e, "categories", {}),
    "channel renamed": lambda e: setattr(e, "channel_name", f"renamed-{len(e.messages)}"),
    "channel name lost": lambda e: setattr(e, "channel_name", None),
    "a minute passes": lambda e: setattr(e, "updated_at", e.updated_at - 61),
    "an hour passes": lambda e: setattr(e, "updated_at", e.updated_at - 3600),
    "touched": lambda e: setattr(e, "updated_at", NOW),
}
SETTINGS = [
    ServerSettings(),
    ServerSettings(render_mode="supersede"),
    ServerSettings(crude_message_count=2),
    ServerSettings(crude_message_count=0),
    ServerSettings(categories=(Category("Plans", "what"), Category("Mood", "how"))),
]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(sorted(CHANGES)),
            st.sampled_from(range(len(SETTINGS))),
            st.sampled_from(["Bot", "Other-Bot"]),
        ),
        max_size=12,
    )
)
def test_reused_segments_always_match_a_fresh_render(steps: list[tuple[str, int, str]]) -> None:
    """Whatever changes in an entry (its window, distilled content, in-place category
    edits, its channel's name, its age) or in the settings and bot name, the context
    rendered with reused segments is exactly the one rendered from scratch."""
    cache = RenderCache()
    e = entry("one", "two", "three")
    e.summary = "FIRST SUMMARY"
    for change, which, bot in steps:
        CHANGES[change](e)
        e.revision += 1
        now_settings = SETTINGS[which]
        with_cache = other_channels_blocks([e], now_settings, bot, NOW, cache)
        fresh = other_channels_blocks([e], now_settings, bot, NOW, None)
        assert with_cache == fresh, change
        again = other_channels_blocks([e], now_settings, bot, NOW, cache)
        assert again == fresh


def test_an_unchanged_segment_is_reused_not_rendered_again() -> None:
    """The second render of an unchanged entry returns the kept segment itself."""
    cache = RenderCache()
    plain = ServerSettings()
    e = entry("one", "two")
    first = other_channels_blocks([e], plain, "Bot", NOW, cache)
    second = other_channels_blocks([e], plain, "Bot", NOW, cache)
    assert first == second
    kept = cache.segment(e, (plain, "Bot", 0, ENGLISH))
    assert kept is not None and kept[0] in first[0].text
    e.messages += (message("three"),)
    assert cache.segment(e, (plain, "Bot", 0, ENGLISH)) is None
