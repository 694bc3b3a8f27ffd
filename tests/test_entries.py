"""What ``get_entry`` answers, and which entries ``/memory show`` can find, on both stores."""

from __future__ import annotations

from helpers import Opener

from stm import ShortTermMemory
from stm.keys import server_key, user_key
from stm.testing import ctx, turn

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
