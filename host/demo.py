"""``python bot.py --demo``: the real cog in a not logged-in bot, through a scripted story."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import discord
from discord.ext import commands

from cogs.short_term_memory import EXTENSION
from cogs.testing import Reply, option, subcommand
from stm import STMConfig, ToolRegistry, server_key, user_key

from .models import ScriptedModel
from .pipeline import ChatPipeline
from .prompt import Message
from .world import OWNER_ID, Person, Place, World

__all__ = ["make_bot", "run_demo"]

HISTORY = 10
Out = Callable[[str], None]


def make_bot(config: STMConfig) -> commands.Bot:
    """A bot as a host would build it, with the memory settings and a tool registry."""
    bot = commands.Bot(
        command_prefix=commands.when_mentioned,
        intents=discord.Intents.default(),
        owner_id=OWNER_ID,
        help_command=None,
    )
    bot.stm_config = config  # type: ignore[attr-defined]
    bot.tools = ToolRegistry()  # type: ignore[attr-defined]
    return bot


async def settle() -> None:
    """Let the dispatched ``generation_finished`` listeners run."""
    for _ in range(3):
        await asyncio.sleep(0)


class Demo:
    """The story, told one stage at a time."""

    def __init__(self, bot: commands.Bot, out: Out) -> None:
        self.bot = bot
        self.out = out
        self.world = World(bot)
        self.pipeline = ChatPipeline(bot, ScriptedModel(), bot.tools)  # type: ignore[attr-defined]
        people = self.world.people
        self.alice, self.bob, self.carol = people["alice"], people["bob"], people["carol"]
        places = self.world.places
        self.general, self.games = places["harbor/general"], places["harbor/games"]
        self.staff, self.elsewhere = places["harbor/staff"], places["lighthouse/general"]
        # What each channel's history shows the model, as a Discord host would read it.
        self.history: dict[int, list[Message]] = {}

    def forget_history_of(self, person: Person) -> None:
        """Drop ``person``'s lines, and the replies to them, from every channel's history."""
        prefix = f"{person.name}: "
        for place, history in self.history.items():
            kept: list[Message] = []
            skip_reply = False
            for message in history:
                if message["role"] == "user":
                    skip_reply = str(message["content"]).startswith(prefix)
                    if not skip_reply:
                        kept.append(message)
                elif not skip_reply:
                    kept.append(message)
            self.history[place] = kept

    def stage(self, title: str) -> None:
        self.out(f"\n=== {title} ===")

    def say(self, text: str, indent: int = 2) -> None:
        self.out(textwrap.indent(text, " " * indent))

    async def turn(
        self, person: Person, place: Place, text: str, *, persona_id: int | None = None
    ) -> None:
        ctx = self.world.context(person, place, text, persona_id=persona_id)
        history = self.history.setdefault(place.id, [])
        record = await self.pipeline.run_turn(ctx, text, history=history[-HISTORY:])
        history += [
            {"role": "user", "content": f"{person.name}: {text}"},
            {"role": "assistant", "content": record.outcome.reply},
        ]
        await settle()
        where = place.key + (f" (persona {persona_id})" if persona_id else "")
        self.say(f"[{where}] {person.name}: {text}")
        for call in record.outcome.tool_calls:
            self.say(f"-> model calls {call.name}({call.arguments})", 6)
            self.say(f"<- {'ok' if call.result.success else 'refused'}: {call.result.message}", 6)
        self.say(f"[{where}] {ctx.bot_name}: {record.outcome.reply}")

    async def show_context(
        self, person: Person, place: Place, label: str, *, persona_id: int | None = None
    ) -> None:
        ctx = self.world.context(person, place, "", persona_id=persona_id)
        context = await self.pipeline.memory.build_context(ctx)
        self.say(f"--- context for {person.name} in {place.key} ({label}) ---")
        self.say(str(context) or "(empty: nothing to recall here)", 4)

    async def show_entry(self, key: str) -> None:
        entry = await self.pipeline.memory.get_entry(key)
        if entry is None:
            self.say(f"{key}: (nothing held)")
            return
        distilled = entry.summary or (json.dumps(entry.categories) if entry.categories else "-")
        self.say(
            f"{key}: {len(entry.messages)} recent message(s), "
            f"turns since refresh {entry.turns_since_refresh}, distilled: {distilled}"
        )

    async def show_rows(self, database: Path) -> None:
        """What the file holds, beside what the library reads from it."""
        with sqlite3.connect(database) as db:
            rows = db.execute(
                "SELECT key, summary, categories FROM short_term_memories ORDER BY key"
            ).fetchall()
        db.close()
        if not rows:
            self.say("(no rows)")
        for key, summary, categories in rows:
            stored = ", ".join(
                f"{name} {_stored(value)}"
                for name, value in (("summary", summary), ("categories", categories))
            )
            entry = await self.pipeline.memory.get_entry(key)
            read = "nothing (expired or cleared)"
            if entry is not None:
                read = json.dumps(entry.summary) if entry.summary else "no summary"
                if entry.categories:
                    read += f", categories {json.dumps(entry.categories)}"
            self.say(f"{key}: {stored}")
            self.say(f"-> the library decrypts: {read}", 6)

    async def command(
        self,
        name: str,
        *options: dict[str, object],
        person: Person,
        place: Place,
        press: str | None = None,
        **extra: object,
    ) -> None:
        """Use a slash command; ``press``: then press that button of its answer."""
        shown = " ".join([name, *(str(o.get("name")) for o in options)])
        replies = await self.world.command(name, *options, person=person, place=place, **extra)
        self.say(f"{person.name} uses /{shown} in {place.key}:")
        self.replies(replies)
        if press is not None:
            self.say(f"{person.name} presses {press}:")
            self.replies(await self.world.offline.click(replies[-1], press, user=person))

    def replies(self, replies: list[Reply]) -> None:
        for reply in replies:
            tag = "ephemeral" if reply.ephemeral else "public"
            change = " (the message now reads)" if reply.kind == "edit" else ""
            self.say(f"[{tag}]{change} {self.world.readable(reply.content)}", 6)
            if reply.buttons:
                self.say(f"[buttons: {' | '.join(reply.buttons)}]", 6)


def _stored(value: object) -> str:
    """A stored column as the demo shows it: ciphertext by its size, never its bytes."""
    if value is None or value in ("", "{}"):
        return "empty"
    if isinstance(value, bytes):
        return f"encrypted, {len(value)} bytes"
    return repr(value)


async def _first_life(demo: Demo, database: Path) -> None:
    alice, bob, carol = demo.alice, demo.bob, demo.carol
    general, games, staff, elsewhere = demo.general, demo.games, demo.staff, demo.elsewhere
    memory = demo.pipeline.memory

    demo.stage("1. Passive capture: each turn is kept under a user key and a server key")
    await demo.turn(alice, general, "I'm planning a trip to Lisbon next week.")
    await demo.show_entry(user_key(alice.id, general.id))
    await demo.show_entry(server_key(1100, general.id))
    await demo.turn(bob, general, "Lisbon is great, try the pastel de nata in Belem.")
    await demo.turn(alice, staff, "Staff only: the moderator rota changes on Monday.")
    dm = demo.world.dm(alice)
    await demo.turn(alice, dm, "Between us: I still need to book the hotel.")
    await demo.show_entry(user_key(alice.id, dm.id))

    demo.stage("2. The cadence nudge makes the model call update_short_term_memory")
    await demo.turn(alice, general, "Which tram goes up to the castle?")
    await memory.flush()
    demo.say("stored rows in the SQLite file (recent messages are never stored; distilled text")
    demo.say("is encrypted under a key per row, which a purge overwrites):")
    await demo.show_rows(database)

    demo.stage("3. Rendered context: the same channel, another channel, and where it must not go")
    await demo.show_context(alice, general, "same channel: only the distilled notes")
    await demo.show_context(bob, games, "another channel of the server; private #staff left out")
    await demo.show_context(alice, elsewhere, "another server: nothing from Harbor")
    await demo.turn(alice, games, "Anyone up for chess tonight?", persona_id=7)
    await demo.show_context(
        alice, games, "persona 7: recalls nothing of the no-persona chats", persona_id=7
    )

    demo.stage("4. /refresh clears one channel, for everyone")
    await demo.turn(bob, games, "I'll bring the board.")
    await demo.command("refresh", person=bob, place=games)
    await demo.command("refresh", person=bob, place=games)
    await demo.show_entry(server_key(1100, games.id))
    await demo.show_entry(server_key(1100, general.id))

    demo.stage("5. A user purge: Bob's words leave every shared memory")
    await demo.command(
        "purge-memory",
        option("user", str(bob.id), 6),
        person=carol,
        place=general,
        press="Confirm",
        resolved_users=[bob.payload],
    )
    await demo.show_entry(server_key(1100, general.id))
    await demo.command("memory", subcommand("show"), person=alice, place=general)
    # The channel history a host reads from Discord is not short-term memory: a host that
    # honours a purge in its prompts leaves the purged user's messages out of it too.
    demo.forget_history_of(bob)
    demo.say("(the demo host also leaves Bob's messages out of the channel history it sends)")
    await demo.turn(alice, general, "Back to planning: what about Sintra?")
    await demo.turn(alice, general, "And is the ferry to Cacilhas worth it?")
    await memory.flush()


def demo_config(database: Path) -> STMConfig:
    """The demo's settings: its own file, a short cadence, and nothing from ``STM_*``."""
    # A prefix no variable uses, and no .env file: the operator's settings (a database
    # path, a bad value) are for the bot, not for the story.
    return STMConfig(
        database=str(database),
        refresh_cadence=2,
        _env_prefix="STM_DEMO_IGNORES_THE_ENVIRONMENT_",
        _env_file=None,
    )


async def run_demo(out: Out = print) -> int:
    """Tell the story; returns the exit status."""
    with tempfile.TemporaryDirectory(prefix="stm-demo-") as tmp:
        database = Path(tmp) / "stm.sqlite3"
        config = demo_config(database)
        out(f"Short-term memory demo: a real cog in a not logged-in bot, SQLite at {database}")
        out("The model is a scripted stand-in that calls the tool when nudged; no network.")
        bot = make_bot(config)
        async with bot:
            await bot.load_extension(EXTENSION)
            demo = Demo(bot, out)
            await _first_life(demo, database)
        demo.stage("6. Restart: a new bot on the same file")
        bot = make_bot(config)
        async with bot:
            await bot.load_extension(EXTENSION)
            demo = Demo(bot, out)
            demo.say("distilled notes survive in the database; recent messages do not:")
            await demo.show_entry(server_key(1100, demo.general.id))
            await demo.show_context(demo.alice, demo.general, "after the restart")
            await demo.show_context(demo.carol, demo.games, "another channel after the restart")
    out("\nDemo finished.")
    return 0
