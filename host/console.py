"""``python bot.py --console``: chat in the terminal on the same pipeline as the Discord bot."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from cogs.short_term_memory import EXTENSION
from cogs.testing import Reply, option, subcommand
from stm import STMConfig, redact_url

from .demo import make_bot, settle
from .models import ChatModel, ScriptedModel
from .pipeline import ChatPipeline
from .prompt import Message
from .world import Person, Place, World

__all__ = ["Console", "run_console"]

log = logging.getLogger("host.console")

Ask = Callable[[str], Awaitable[str | None]]
Out = Callable[[str], None]
HISTORY = 12
HELP = """\
Type to talk. Console commands:
  /as NAME            speak as alice, bob, carol (admin, bot owner) or dan (Manage Server)
  /in PLACE           harbor/general, harbor/games, harbor/staff (private),
                      lighthouse/general, or dm
  /persona ID|none    talk to a persona
  /context            show the memory context of the next turn here
  /press BUTTON       press a button of the bot's last answer that has some (Confirm, Cancel)
  /help, /quit
Slash commands, as the current user here:
  /refresh   /memory show|forget|pause|resume   /purge-memory NAME [everywhere]
  /memory-settings show | render-mode MODE | cadence N | crude-count N | enabled true|false
  /memory-settings categories list | add LABEL [DESCRIPTION] | edit LABEL NEW [DESCRIPTION]
                              | remove LABEL
Quote anything with spaces, e.g.
  /memory-settings categories add "Trip plans" "Where and when"
  /quit ends the session."""

TRUE_WORDS = ("true", "on", "yes", "1")
FALSE_WORDS = ("false", "off", "no", "0")
CATEGORY_FIELDS = {
    "list": [],
    "add": ["label", "description"],
    "edit": ["label", "new_label", "description"],
    "remove": ["label"],
}
SLASH_COMMANDS = ("refresh", "memory", "purge-memory", "memory-settings")
MEMORY_SUBCOMMANDS = ("show", "forget", "pause", "resume")
SETTINGS_SUBCOMMANDS = ("show", "render-mode", "cadence", "crude-count", "enabled", "categories")

SETTING_OPTIONS: dict[str, tuple[str, int]] = {
    "render-mode": ("mode", 3),
    "cadence": ("turns", 4),
    "crude-count": ("count", 4),
    "enabled": ("enabled", 5),
}


class Usage(Exception):
    """A console line that cannot be run; the message says why, in one line."""


def _value(field: str, text: str, kind: int) -> Any:
    if kind == 4:
        try:
            return int(text)
        except ValueError:
            raise Usage(f"{field} takes a whole number, not {text!r}") from None
    if kind == 5:
        if text.lower() in TRUE_WORDS:
            return True
        if text.lower() in FALSE_WORDS:
            return False
        raise Usage(f"{field} takes true or false, not {text!r}")
    return text


def _arguments(args: list[str], least: int, most: int, usage: str) -> list[str]:
    if len(args) < least:
        raise Usage(f"missing argument: {usage}")
    if len(args) > most:
        raise Usage(f"too many words: {usage} (quote anything with spaces)")
    return args


def _choice(word: str, choices: tuple[str, ...] | list[str], what: str) -> str:
    if word not in choices:
        raise Usage(f"unknown {what} {word!r}: one of {', '.join(choices)}")
    return word


class Console:
    """The state of a console session: who speaks where, and the transcript per channel."""

    def __init__(self, world: World, pipeline: ChatPipeline, out: Out) -> None:
        self.world = world
        self.pipeline = pipeline
        self.out = out
        self.person: Person = world.people["alice"]
        self.place: Place = world.places["harbor/general"]
        self.persona: int | None = None
        self.history: dict[int, list[Message]] = {}
        # The bot's last answer with buttons, for /press.
        self.buttons: Reply | None = None

    @property
    def prompt(self) -> str:
        persona = f" persona {self.persona}" if self.persona else ""
        return f"{self.person.name}@{self.place.key}{persona}> "

    async def handle(self, line: str) -> bool:
        """Run one input line; False when the session should end."""
        line = line.strip()
        if not line:
            return True
        if not line.startswith("/"):
            await self.talk(line)
            return True
        try:
            words = shlex.split(line[1:])
        except ValueError as exc:
            self.out(f"cannot read that: {exc}")
            return True
        if not words:
            return True
        name, args = words[0], words[1:]
        if name in ("quit", "exit"):
            return False
        try:
            await self.command(name, args)
        except Usage as exc:
            self.out(f"cannot do that: {exc}. /help lists the commands.")
        return True

    async def talk(self, text: str) -> None:
        ctx = self.world.context(self.person, self.place, text, persona_id=self.persona)
        history = self.history.setdefault(self.place.id, [])
        try:
            record = await self.pipeline.run_turn(ctx, text, history=history[-HISTORY:])
        except Exception as exc:
            # As on Discord: the turn is lost, the session is not. The model's endpoint may
            # be down, unknown or slow; say which, in one line (the traceback with -v).
            log.info("generation failed", exc_info=True)
            detail = " ".join(str(exc).split())[:200]
            self.out(f"(the model could not answer: {type(exc).__name__}: {detail})")
            return
        history += [
            {"role": "user", "content": f"{self.person.name}: {text}"},
            {"role": "assistant", "content": record.outcome.reply},
        ]
        await settle()
        for call in record.outcome.tool_calls:
            state = "ok" if call.result.success else "refused"
            self.out(f"  (tool {call.name} {call.arguments} -> {state}: {call.result.message})")
        self.out(f"{ctx.bot_name}: {record.outcome.reply}")

    async def command(self, name: str, args: list[str]) -> None:
        world = self.world
        if name == "help":
            self.out(HELP)
        elif name == "as":
            (who,) = _arguments(args, 1, 1, "/as NAME")
            self.person = world.people[_choice(who.lower(), list(world.people), "person")]
            if self.place.key == "dm":
                self.place = world.dm(self.person)  # their own DM, not the last speaker's
        elif name == "in":
            (where,) = _arguments(args, 1, 1, "/in PLACE")
            _choice(where, [*world.places, "dm"], "place")
            self.place = world.dm(self.person) if where == "dm" else world.places[where]
        elif name == "persona":
            (persona,) = _arguments(args, 1, 1, "/persona ID|none")
            self.persona = None if persona == "none" else _value("persona", persona, 4)
        elif name == "press":
            (label,) = _arguments(args, 1, 1, "/press BUTTON")
            await self.press(label)
        elif name == "context":
            ctx = world.context(self.person, self.place, "", persona_id=self.persona)
            context = await self.pipeline.memory.build_context(ctx)
            self.out(str(context) or "(no memory context here)")
        else:
            await self.slash(name, args)

    async def slash(self, name: str, args: list[str]) -> None:
        options: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        if name not in SLASH_COMMANDS:
            raise Usage(f"unknown command /{name}")
        if name == "memory":
            (sub,) = _arguments(args, 1, 1, "/memory show|forget|pause|resume")
            options = [subcommand(_choice(sub, MEMORY_SUBCOMMANDS, "subcommand"))]
        elif name == "purge-memory":
            who, *rest = _arguments(args, 1, 2, "/purge-memory NAME [everywhere]")
            target = self.world.people[_choice(who.lower(), list(self.world.people), "person")]
            options = [option("user", str(target.id), 6)]
            if rest:
                _choice(rest[0], ("everywhere",), "option")
                options.append(option("everywhere", True, 5))
            extra["resolved_users"] = [target.payload]
        elif name == "memory-settings":
            options = [self._settings_option(args)]
        else:
            _arguments(args, 0, 0, "/refresh")
        if self.place.key == "dm":
            self.place = self.world.dm(self.person)
        replies = await self.world.command(
            name, *options, person=self.person, place=self.place, **extra
        )
        self.show(replies)

    async def press(self, label: str) -> None:
        shown = self.world.offline.current(self.buttons) if self.buttons else None
        if shown is None or not shown.buttons:
            raise Usage("the bot's last answers have no buttons")
        found = [b for b in shown.buttons if b.casefold() == label.casefold()]
        (button,) = found or [_choice(label, shown.buttons, "button")]
        self.show(await self.world.offline.click(shown, button, user=self.person))

    def show(self, replies: list[Reply]) -> None:
        for reply in replies:
            tag = "only you see this" if reply.ephemeral else "everyone sees this"
            edited = ", the message now reads" if reply.kind == "edit" else ""
            self.out(f"[{tag}{edited}] {self.world.readable(reply.content)}")
            if reply.buttons:
                self.buttons = reply
                self.out(f"  [buttons: {' | '.join(reply.buttons)}] (/press BUTTON)")

    @staticmethod
    def _settings_option(args: list[str]) -> dict[str, Any]:
        usage = "/memory-settings show|render-mode|cadence|crude-count|enabled|categories ..."
        sub = _choice(_arguments(args, 1, 5, usage)[0], SETTINGS_SUBCOMMANDS, "subcommand")
        if sub == "categories":
            usage = "/memory-settings categories list|add|edit|remove ..."
            action = _choice(_arguments(args[1:], 1, 4, usage)[0], list(CATEGORY_FIELDS), "action")
            fields = CATEGORY_FIELDS[action]
            least = 0 if action == "list" else 1
            words = " ".join(f.upper() for f in fields)
            rest = _arguments(args[2:], least, len(fields), f"categories {action} {words}")
            given = [option(f, v, 3) for f, v in zip(fields, rest, strict=False)]
            return subcommand("categories", subcommand(action, *given), group=True)
        if sub in SETTING_OPTIONS:
            field, kind = SETTING_OPTIONS[sub]
            (value,) = _arguments(args[1:], 1, 1, f"/memory-settings {sub} {field.upper()}")
            return subcommand(sub, option(field, _value(field, value, kind), kind))
        _arguments(args[1:], 0, 0, f"/memory-settings {sub}")
        return subcommand(sub)


class _StdinLines:
    """Lines of standard input, read from its file descriptor in daemon threads.

    When SIGTERM or Ctrl-C stops the console, the read of the next line is still
    blocked. In ``asyncio.to_thread`` it would keep ``asyncio.run`` from returning
    until someone pressed Enter; through ``input()`` it would hold ``sys.stdin``'s
    lock, on which the interpreter aborts at exit. A raw ``os.read`` holds neither.
    """

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.pending = b""
        self.encoding = getattr(sys.stdin, "encoding", None) or "utf-8"

    def readline(self) -> str | None:
        """The next line without its newline; None at end of input."""
        while b"\n" not in self.pending:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                rest, self.pending = self.pending, b""
                return rest.decode(self.encoding, "replace") if rest else None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode(self.encoding, "replace").removesuffix("\r")

    async def ask(self, prompt: str) -> str | None:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str | None] = loop.create_future()

        def settle_answer(line: str | None, error: BaseException | None) -> None:
            if answer.done():  # the console stopped waiting
                return
            if error is None:
                answer.set_result(line)
            else:
                answer.set_exception(error)

        def read() -> None:
            line: str | None = None
            error: BaseException | None = None
            try:
                line = self.readline()
            except Exception as exc:
                error = exc
            # The loop is closed once the console has stopped: nobody waits for this line.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle_answer, line, error)

        threading.Thread(target=read, name="console-input", daemon=True).start()
        return await answer


async def run_console(
    model: ChatModel | None = None,
    *,
    config: STMConfig | None = None,
    ask: Ask | None = None,
    out: Out = print,
) -> int:
    """Chat until /quit or end of input; returns the exit status."""
    config = config or STMConfig()
    ask = ask or _StdinLines().ask
    chosen: ChatModel = model or ScriptedModel()
    out(f"Model: {chosen.description}.")
    if model is None:
        out("(Set OPENAI_MODEL, and OPENAI_BASE_URL or OPENAI_API_KEY, to use a real model.)")
    out(f"Memory: {redact_url(config.database)}. /help lists the commands.")
    bot = make_bot(config)
    try:
        async with bot:
            await bot.load_extension(EXTENSION)
            console = Console(World(bot), ChatPipeline(bot, chosen, bot.tools), out)  # type: ignore[attr-defined]
            while True:
                line = await ask(console.prompt)
                if line is None or not await console.handle(line):
                    break
    finally:
        await chosen.close()
    out("Bye.")
    return 0
