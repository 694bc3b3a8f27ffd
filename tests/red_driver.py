"""Run in a venv with Red-DiscordBot and discord-stm: Red loads the cog, a turn, purges, unload.

A real ``redbot.core.bot.Red`` with JSON storage in a temporary folder, not logged in:
discord_stm.testing delivers the owner's ``!load``/``!slash``/``!unload`` messages and the
slash commands, and Red's own ``handle_data_deletion_request`` sends each request type.
Prints one JSON object of what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from discord_stm.short_term_memory import COG_NAME, turn_context_from_message
from discord_stm.testing import OfflineDiscord, Person, subcommand
from redbot.core import _drivers, data_manager
from redbot.core._cli import parse_cli_flags
from redbot.core.bot import Red

from stm import DialogueMessage, GenerationFinished
from stm._keys import server_key

OWNER = Person(700_000_000_000_000_001, "Owner")


def texts(replies: list[Any]) -> list[str]:
    return [r.content for r in replies]


async def start(data: Path, cog_path: str) -> tuple[Red, OfflineDiscord]:
    data_manager.basic_config = {
        **data_manager.basic_config_default,
        "DATA_PATH": str(data),
        "STORAGE_TYPE": "JSON",
        "STORAGE_DETAILS": {},
    }
    await _drivers.get_driver_class().initialize(**data_manager.storage_details())
    # Red's launcher makes the folder of Downloader's libraries before starting the bot.
    (data_manager.cog_data_path(raw_name="Downloader") / "lib").mkdir(parents=True, exist_ok=True)
    flags = parse_cli_flags(
        ["stm-test", "--no-cogs", "--owner", str(OWNER.id), "--prefix", "!",
         "--cog-path", cog_path]
    )  # fmt: skip
    red = Red(cli_flags=flags, description="discord-stm test", dm_help=None)
    await red._async_setup_hook()
    await red._pre_login()
    offline = OfflineDiscord(red, bot_name="Red", owner=OWNER)
    # What Red does once connected (its setup_hook asks Discord for the application).
    await red._pre_connect()
    red._red_ready.set()
    return red, offline


async def main(data: Path, cog_path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    red, offline = await start(data, cog_path)
    channels = offline.server("Harbor", ["general", "games"], owner=OWNER)
    general, games = channels["general"], channels["games"]
    ann, bob, cat, dee = (offline.person(n) for n in ("Ann", "Bob", "Cat", "Dee"))

    out["load"] = texts(await offline.say(OWNER, general, "!load shorttermmemory"))
    cog: Any = red.get_cog(COG_NAME)
    out["cog"] = type(cog).__module__ + "." + type(cog).__qualname__ if cog else None
    out["statement"] = red.extensions["shorttermmemory"].__red_end_user_data_statement__
    out["database"] = cog.config.database
    out["slash_before"] = red.tree.get_command("memory") is not None
    out["enable"] = texts(await offline.say(OWNER, general, "!slash enablecog discord_stm"))
    out["slash_after"] = sorted(c.name for c in red.tree.get_commands())

    # A turn as a chat cog would run it: context, the model's tool call, the capture.
    message = offline.message(ann, general, "we plan a trip to Lisbon")
    ctx = turn_context_from_message(message)
    memory = cog.memory
    event = GenerationFinished(
        context=ctx,
        messages=[
            DialogueMessage(
                role="user", content=ctx.user_text, author_id=ann.id, speaker_name=ctx.user_name
            ),
            DialogueMessage(role="assistant", content="Lisbon is lovely.", speaker_name="Red"),
        ],
    )
    red.dispatch("generation_finished", event)
    await offline.settle()
    result = await cog.tools.execute(
        "update_short_term_memory", ctx, '{"summary": "Ann plans a Lisbon trip"}'
    )
    out["upgrade"] = result.success
    elsewhere = turn_context_from_message(offline.message(ann, games, "and then?"))
    out["context_elsewhere"] = str(await memory.build_context(elsewhere))
    show = await offline.command("memory", subcommand("show"), user=ann, channel=general)
    out["show"] = texts(show)
    await memory.flush()

    # Each of Red's request types; Bob, Cat and Dee paused their memory first.
    for person in (bob, cat, dee):
        await offline.command("memory", subcommand("pause"), user=person, channel=general)
    results = {}
    for requester, person in (("user", ann), ("discord_deleted_user", bob),
                              ("user_strict", cat), ("owner", dee)):  # fmt: skip
        found = await red.handle_data_deletion_request(requester=requester, user_id=person.id)
        results[requester] = {
            "failed_cogs": list(found.failed_cogs),
            "unhandled": list(found.unhandled),
            "opted_out": memory.is_opted_out(person.id),
        }
    out["deletion"] = results
    entry = await memory.get_entry(server_key(general.guild_id, general.id))
    out["after_purge_entry"] = None if entry is None else [entry.summary, len(entry.messages)]
    out["after_purge_show"] = texts(
        await offline.command("memory", subcommand("show"), user=ann, channel=general)
    )

    out["unload"] = texts(await offline.say(OWNER, general, "!unload shorttermmemory"))
    out["after_unload"] = {
        "cog": red.get_cog(COG_NAME) is not None,
        "memory_closed": memory.closed,
        "tool": "update_short_term_memory" in cog.tools,
        "slash": red.tree.get_command("memory") is not None,
    }
    await red.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))))
