"""Several versions of the library on one database (a rolling upgrade): settings fields
one version does not know, written by a newer one, are neither a reason to fall back to
the defaults nor lost when the older version changes the server's settings."""

from __future__ import annotations

import json

from helpers import Opener

from stm.store._base import SaveServerSettings

BOTH_STORES = True
NEWER = {"a_field_of_a_newer_version": {"nested": [1, 2]}, "another_one": "x"}


async def test_fields_of_a_newer_version_are_kept_and_written_back(open_memory: Opener) -> None:
    memory = await open_memory()
    stored = {**json.loads((await memory.get_server_settings(7)).model_dump_json()), **NEWER}
    stored["refresh_cadence"] = 9
    await memory.store.run([SaveServerSettings(7, json.dumps(stored))])
    await memory.close()

    memory = await open_memory()
    assert (await memory.get_server_settings(7)).refresh_cadence == 9  # not the defaults
    await memory.update_server_settings(7, crude_message_count=3)
    await memory.flush()
    raw = json.loads((await memory.store.load_server_settings())[7])
    assert raw["crude_message_count"] == 3 and raw["refresh_cadence"] == 9
    assert {k: raw[k] for k in NEWER} == NEWER
    await memory.close()

    memory = await open_memory()
    settings = await memory.get_server_settings(7)
    assert (settings.refresh_cadence, settings.crude_message_count) == (9, 3)


async def test_settings_that_are_not_an_object_fall_back_to_the_defaults(
    open_memory: Opener,
) -> None:
    memory = await open_memory()
    defaults = await memory.get_server_settings(8)
    await memory.store.run([SaveServerSettings(8, json.dumps(["not", "settings"]))])
    await memory.close()
    memory = await open_memory()
    assert await memory.get_server_settings(8) == defaults


async def test_a_value_changed_here_replaces_the_one_this_version_could_not_read(
    open_memory: Opener,
) -> None:
    """A language this version does not ship is kept while untouched, and replaced once an
    admin here sets the language."""
    memory = await open_memory()
    stored = {**json.loads((await memory.get_server_settings(9)).model_dump_json())}
    stored["language"] = "fr"
    await memory.store.run([SaveServerSettings(9, json.dumps(stored))])
    await memory.close()
    memory = await open_memory()
    await memory.update_server_settings(9, refresh_cadence=4)
    await memory.flush()
    assert json.loads((await memory.store.load_server_settings())[9])["language"] == "fr"
    await memory.update_server_settings(9, language="ja")
    await memory.flush()
    assert json.loads((await memory.store.load_server_settings())[9])["language"] == "ja"
