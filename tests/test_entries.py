"""What ``get_entry`` answers, and which entries ``/memory show`` can find, on both stores."""

from __future__ import annotations

from helpers import Opener

from stm import ShortTermMemory
from stm._keys import server_key, user_key
from stm.testing import Clock, ctx, turn

BOTH_STORES = True


async def upgrade(memory: ShortTermMemory, text: str, **where: object) -> None:
    c = ctx(**where)  # type: ignore[arg-type]
    await memory.capture(turn(c, f"chat about {text}"))
    result = await memory.run_tool(c, {"summary": text})
    assert result.success, result.message


async def test_get_entry_answers_none_for_a_server_with_memory_off(open_memory: Opener) -> None:
    """A server with ``enabled=False`` is fully off: ``get_entry`` answers None for its
    shared and its users' own entries, live and after a restart; DMs and other servers
    answer as before, and turning memory on again shows what was kept."""
    keys = {
        "shared": server_key(100, 10),
        "own": user_key(1, 10),
        "other server": server_key(200, 20),
        "dm": user_key(1, 30),
    }
    first = await open_memory()
    await upgrade(first, "HERE")
    await upgrade(first, "THERE", channel=20, server=200)
    await upgrade(first, "A-DM", channel=30, server=None)
    await first.update_server_settings(100, enabled=False)

    async def answered(memory: ShortTermMemory) -> dict[str, bool]:
        return {name: await memory.get_entry(key) is not None for name, key in keys.items()}

    off = {"shared": False, "own": False, "other server": True, "dm": True}
    assert await answered(first) == off
    await first.close()
    second = await open_memory()
    assert await answered(second) == off
    await second.update_server_settings(100, enabled=True)
    assert await answered(second) == dict.fromkeys(keys, True)


async def test_channel_keys_lists_every_scope_and_persona_after_a_restart(
    open_memory: Opener, clock: Clock
) -> None:
    """The keys of a channel's memory come from the store too: after a restart, every
    persona's entries are found before any of them talks; other channels' and expired
    rows are not listed."""
    first = await open_memory()
    for persona in (None, 7, 8):
        await upgrade(first, f"NOTES-{persona}", persona=persona)
    await upgrade(first, "ELSEWHERE", channel=11, persona=9)
    await first.close()
    second = await open_memory()
    assert len(second.cache) == 0
    expected = sorted(
        key(owner, 10, persona)
        for persona in (None, 7, 8)
        for key, owner in ((server_key, 100), (user_key, 1))
    )
    assert await second.channel_keys(10) == expected
    for listed in expected:
        assert await second.get_entry(listed) is not None
    await second.close()
    clock.advance(48 * 3600)
    third = await open_memory()
    assert await third.channel_keys(10) == []
