"""RenderCache: rendered lines are reused only while what they show is unchanged."""

from __future__ import annotations

from stm.cache import Entry, StoredMessage
from stm.models import ServerSettings
from stm.render import RenderCache, other_channels_blocks

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
    e.messages.append(message("three"))
    assert "three" in render(e, cache)
    e.messages = [m for m in e.messages if m.content != "two"]
    assert "two" not in render(e, cache)
    e.summary = "SUMMARY-NOW"
    assert "SUMMARY-NOW" in render(e, cache)
    reply = entry()
    reply.messages.append(StoredMessage("assistant", "a reply", "", None, NOW, 1))
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
