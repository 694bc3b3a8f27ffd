"""Found in review: server settings that a newer version of the library wrote with a
value this version does not know, on a database both share (a rolling upgrade)."""

from __future__ import annotations

import json

from helpers import Opener

from stm.store._base import SaveServerSettings

BOTH_STORES = True


async def test_a_language_this_version_does_not_ship_keeps_the_servers_other_settings(
    open_memory: Opener,
) -> None:
    """A newer version ships French and a server chose it; the server had also turned its
    memory off. This version reads ``language: "fr"`` as invalid and drops the whole row
    (``SettingsBook.load``): the server's memory is on again here, against its admins'
    choice. docs/processes.md promises an older version reads the settings it knows."""
    memory = await open_memory()
    stored = json.loads((await memory.get_server_settings(7)).model_dump_json())
    stored.update(enabled=False, refresh_cadence=9, language="fr")
    await memory.store.run([SaveServerSettings(7, json.dumps(stored))])
    await memory.close()

    memory = await open_memory()
    settings = await memory.get_server_settings(7)
    assert settings.language is None  # read as its default here
    assert settings.enabled is False
    assert settings.refresh_cadence == 9


async def test_a_change_here_does_not_wipe_settings_with_a_value_this_version_lacks(
    open_memory: Opener,
) -> None:
    """And an admin's change in this version then writes the defaults back over the
    row: the newer version's language and every other setting of the server are lost."""
    memory = await open_memory()
    stored = json.loads((await memory.get_server_settings(7)).model_dump_json())
    stored.update(enabled=False, refresh_cadence=9, language="fr")
    await memory.store.run([SaveServerSettings(7, json.dumps(stored))])
    await memory.close()

    memory = await open_memory()
    await memory.update_server_settings(7, crude_message_count=3)
    await memory.flush()
    raw = json.loads((await memory.store.load_server_settings())[7])
    assert raw["enabled"] is False and raw["refresh_cadence"] == 9
    assert raw["language"] == "fr"
