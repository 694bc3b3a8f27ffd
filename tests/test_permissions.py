"""Permission matrix: every slash command of the cog x every kind of user, as gateway payloads.

Each cell delivers a real INTERACTION_CREATE through the bot's connection state. The
expected outcome comes from the rules in docs/commands.md, written
out below without looking at the cog's checks: an allowed cell must do what the table
says (a purge: a preview with Confirm / Cancel that changes nothing, then, once the
person presses Confirm, the purge); a refused one must answer with one clear ephemeral
message, with no buttons, and change nothing (entries, server settings, opt-outs).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pytest
from discord import app_commands
from discord_fakes import Harness, harness

from cogs.testing import Reply, option, subcommand
from host.world import ADMIN, MANAGE_SERVER, OWNER_ID, Person, Place
from stm import Category, TurnContext
from stm._keys import server_key, user_key

HARBOR, LIGHTHOUSE = 1100, 1200
EVE = Person(505, "Eve", ADMIN, key="eve")  # a server admin who does not own the bot
BOB_ID = 502  # the target of /purge-memory; never one of the actors

Who = Literal["everyone", "manage_server", "administrator", "owner"]


@dataclass(frozen=True)
class Actor:
    """Who uses the command, and whether they do it in a server channel or in their DM."""

    label: str
    person: str  # a key of the world's people, or "eve"
    permissions: int
    in_dm: bool = False


ACTORS = (
    Actor("member", "alice", 0),
    Actor("manage-server", "dan", MANAGE_SERVER),
    Actor("administrator", "eve", ADMIN),
    Actor("owner-without-permissions", "carol", 0),
    Actor("dm-user", "alice", 0, in_dm=True),
    # "Servers only" holds for the owner too.
    Actor("dm-owner", "carol", 0, in_dm=True),
)


# -- the documented rules -----------------------------------------------------
def refusal(who: Who, servers_only: bool, actor: Actor) -> tuple[str, ...]:
    """What a refusal must mention under README's table; () when the command is allowed."""
    is_owner = _person_id(actor.person) == OWNER_ID
    # In Discord, Administrator grants every permission, Manage Server included.
    administrator = bool(actor.permissions & ADMIN)
    manage_server = administrator or bool(actor.permissions & MANAGE_SERVER)
    if servers_only and actor.in_dm:
        return ("server",)
    if who == "everyone":
        return ()
    if who == "manage_server":
        return () if manage_server or is_owner else ("Manage Server",)
    if who == "administrator":
        return () if administrator or is_owner else ("Administrator",)
    # Owner-only (purge everywhere): a non-admin may be told either missing piece.
    if is_owner:
        return ()
    return ("owner",) if administrator else ("owner", "Administrator")


def _person_id(key: str) -> int:
    return {"alice": 501, "bob": 502, "carol": OWNER_ID, "dan": 504, "eve": EVE.id}[key]


# -- the world and its memory -------------------------------------------------
PEOPLE = ("alice", "bob", "carol", "dan", "eve")


def marker(person: str, place: str) -> str:
    return f"{person}-said-in-{place}"


@dataclass
class State:
    """Everything a command could change: entries, server settings, opt-outs."""

    entries: dict[str, dict[str, Any] | None]
    settings: dict[int, dict[str, Any]]
    opted_out: dict[str, bool]

    def labels(self, server: int) -> list[str]:
        return [c["label"] for c in self.settings[server]["categories"]]

    def texts(self, key: str) -> list[str]:
        entry = self.entries[key]
        return [] if entry is None else [m["content"] for m in entry["messages"]]


def places(h: Harness, person: str) -> dict[str, Place]:
    return {"general": h.general, "lighthouse": h.elsewhere, "dm": h.world.dm(_person(h, person))}


def _person(h: Harness, key: str) -> Person:
    return EVE if key == "eve" else h.world.people[key]


def keys(h: Harness) -> list[str]:
    found = [server_key(HARBOR, h.general.id), server_key(LIGHTHOUSE, h.elsewhere.id)]
    for person in PEOPLE:
        found += [user_key(_person_id(person), p.id) for p in places(h, person).values()]
    return found


async def populate(h: Harness) -> None:
    """Every person talks in Harbor, in Lighthouse and in their DM; both servers have categories."""
    for person in PEOPLE:
        for name, place in places(h, person).items():
            await h.say(_person(h, person), place, marker(person, name))
    for server in (HARBOR, LIGHTHOUSE):
        await h.memory.set_categories(server, [Category("Mood", "Feel"), Category("Plans", "")])


async def snapshot(h: Harness) -> State:
    # What is held, whether or not a server's memory is turned on: get_entry answers None
    # for a server with enabled=False, which is the setting's effect, not a deletion.
    real = h.memory.settings_for
    h.memory.settings_for = lambda server: real(server).model_copy(update={"enabled": True})  # type: ignore[method-assign]
    entries: dict[str, dict[str, Any] | None] = {}
    try:
        for key in keys(h):
            entry = await h.memory.get_entry(key)
            entries[key] = None if entry is None else entry.model_dump()
    finally:
        del h.memory.settings_for
    settings = {
        s: (await h.memory.get_server_settings(s)).model_dump() for s in (HARBOR, LIGHTHOUSE)
    }
    opted_out = {p: h.memory.is_opted_out(_person_id(p)) for p in PEOPLE}
    return State(entries, settings, opted_out)


# -- the commands -------------------------------------------------------------
@dataclass(frozen=True)
class Use:
    """One way of using the cell's command: who ran it, where, and what came back."""

    actor: Actor
    place: str  # "general" or "dm"
    replies: list[Reply]

    @property
    def person_id(self) -> int:
        return _person_id(self.actor.person)


Effect = Callable[[Harness, State, State, Use], None]


def _refreshed(h: Harness, before: State, after: State, use: Use) -> None:
    place = places(h, use.actor.person)[use.place]
    cleared = {k for k in keys(h) if k.endswith(f":{place.id}")}
    assert cleared and all(after.entries[k] is None for k in cleared)
    assert {k: v for k, v in after.entries.items() if k not in cleared} == {
        k: v for k, v in before.entries.items() if k not in cleared
    }


def _shown(h: Harness, before: State, after: State, use: Use) -> None:
    assert after == before
    assert marker(use.actor.person, use.place) in "".join(r.content for r in use.replies)


def _forgotten(h: Harness, before: State, after: State, use: Use) -> None:
    own = [user_key(use.person_id, p.id) for p in places(h, use.actor.person).values()]
    assert all(before.entries[k] is not None and after.entries[k] is None for k in own)
    gone = marker(use.actor.person, "")
    assert not any(gone in text for key in keys(h) for text in after.texts(key))
    others = [k for k in keys(h) if k.startswith("shortterm:user:") and k not in own]
    assert all(after.entries[k] == before.entries[k] for k in others)


def _opted_out(value: bool) -> Effect:
    def check(h: Harness, before: State, after: State, use: Use) -> None:
        assert after.opted_out == {**before.opted_out, use.actor.person: value}
        assert after.entries == before.entries

    return check


def _purged(everywhere: bool) -> Effect:
    def check(h: Harness, before: State, after: State, use: Use) -> None:
        bob = {name: user_key(BOB_ID, p.id) for name, p in places(h, "bob").items()}
        assert after.entries[bob["general"]] is None
        assert "bob-said-in-general" not in after.texts(server_key(HARBOR, h.general.id))
        for name in ("lighthouse", "dm"):
            if everywhere:
                assert after.entries[bob[name]] is None
            else:
                assert after.entries[bob[name]] == before.entries[bob[name]]
        mine = user_key(use.person_id, h.general.id)
        assert after.entries[mine] == before.entries[mine]

    return check


def _setting(name: str, value: object) -> Effect:
    def check(h: Harness, before: State, after: State, use: Use) -> None:
        assert after.settings[HARBOR] == {**before.settings[HARBOR], name: value}
        assert after.settings[LIGHTHOUSE] == before.settings[LIGHTHOUSE]
        assert after.entries == before.entries

    return check


def _labels(expected: list[str]) -> Effect:
    def check(h: Harness, before: State, after: State, use: Use) -> None:
        assert after.labels(HARBOR) == expected
        assert after.settings[LIGHTHOUSE] == before.settings[LIGHTHOUSE]

    return check


def _lists_categories(h: Harness, before: State, after: State, use: Use) -> None:
    assert after == before
    assert "Mood" in use.replies[0].content and "Plans" in use.replies[0].content


async def _opt_out_first(h: Harness, person_id: int) -> None:
    await h.memory.set_user_opt_out(person_id, True)


def _notes(entry: dict[str, Any] | None) -> tuple[object, object]:
    return (None, None) if entry is None else (entry["summary"], entry["categories"])


async def _two_versions(h: Harness, person_id: int) -> None:
    """A good version of the person's notes (and the channel's) in #general and their DM,
    then a bad one: version 1 is the one to bring back."""
    person = next(k for k in PEOPLE if _person_id(k) == person_id)
    for name, place in places(h, person).items():
        server = None if name == "dm" else (HARBOR if name == "general" else LIGHTHOUSE)
        for text in ("good notes", "bad notes"):
            context = TurnContext(user_id=person_id, channel_id=place.id, server_id=server)
            await h.memory.build_context(context)
            field = "summary" if server is None else "mood"
            result = await h.memory.run_tool(context, {field: f"{text} of {person} in {name}"})
            assert result.success, result.message
    await h.memory.flush()


def _shown_with_history(h: Harness, before: State, after: State, use: Use) -> None:
    _shown(h, before, after, use)
    text = "".join(r.content for r in use.replies)
    for version in ("good notes", "bad notes"):
        assert f"{version} of {use.actor.person} in {use.place}" in text, text
    assert "Version 1" in text and "Version 2" in text and "(current)" in text


def _restored(shared: bool) -> Effect:
    def check(h: Harness, before: State, after: State, use: Use) -> None:
        place = places(h, use.actor.person)[use.place]
        key = server_key(HARBOR, place.id) if shared else user_key(use.person_id, place.id)
        wanted = f"good notes of {use.actor.person} in {use.place}"
        summary, categories = _notes(after.entries[key])
        assert wanted in f"{summary} {categories}" and "bad notes" not in f"{summary} {categories}"
        assert {k: v for k, v in after.entries.items() if k != key} == {
            k: v for k, v in before.entries.items() if k != key
        }

    return check


@dataclass(frozen=True)
class Command:
    """A slash command as README documents it, and what it must do when allowed."""

    label: str
    name: str
    options: tuple[dict[str, Any], ...]
    who: Who
    servers_only: bool
    effect: Effect
    public: bool = False  # /refresh answers in the channel; everything else only to the user
    confirm: bool = False  # a purge: it acts only once its preview is confirmed
    prepare: Callable[[Harness, int], Awaitable[None]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        return self.label.split(" [", 1)[0].lstrip("/")


def _settings(*path: str, options: tuple[dict[str, Any], ...] = ()) -> tuple[dict[str, Any]]:
    if len(path) == 2:
        return (subcommand(path[0], subcommand(path[1], *options), group=True),)
    return (subcommand(path[0], *options),)


BOB = {"resolved_users": [Person(BOB_ID, "Bob", key="bob").payload]}
PURGE_BOB = option("user", str(BOB_ID), 6)

COMMANDS = (
    Command("/refresh", "refresh", (), "everyone", False, _refreshed, public=True),
    Command("/memory show", "memory", (subcommand("show"),), "everyone", False, _shown),
    Command(
        "/memory forget",
        "memory",
        (subcommand("forget"),),
        "everyone",
        False,
        _forgotten,
        confirm=True,
    ),
    Command("/memory pause", "memory", (subcommand("pause"),), "everyone", False, _opted_out(True)),
    Command(
        "/memory show [history:True]",
        "memory",
        (subcommand("show", option("history", True, 5)),),
        "everyone",
        False,
        _shown_with_history,
        prepare=_two_versions,
    ),
    Command(
        "/memory restore",
        "memory",
        (subcommand("restore", option("version", 1, 4)),),
        "everyone",
        False,
        _restored(shared=False),
        confirm=True,
        prepare=_two_versions,
    ),
    Command(
        "/memory restore [shared:True]",
        "memory",
        (subcommand("restore", option("version", 1, 4), option("shared", True, 5)),),
        "manage_server",
        True,
        _restored(shared=True),
        confirm=True,
        prepare=_two_versions,
    ),
    Command(
        "/memory resume",
        "memory",
        (subcommand("resume"),),
        "everyone",
        False,
        _opted_out(False),
        prepare=_opt_out_first,
    ),
    Command(
        "/purge-memory",
        "purge-memory",
        (PURGE_BOB,),
        "administrator",
        True,
        _purged(everywhere=False),
        confirm=True,
        extra=BOB,
    ),
    Command(
        "/purge-memory [everywhere:True]",
        "purge-memory",
        (PURGE_BOB, option("everywhere", True, 5)),
        "owner",
        True,
        _purged(everywhere=True),
        confirm=True,
        extra=BOB,
    ),
    Command(
        "/memory-settings show",
        "memory-settings",
        _settings("show"),
        "manage_server",
        True,
        _lists_categories,
    ),
    Command(
        "/memory-settings render-mode",
        "memory-settings",
        _settings("render-mode", options=(option("mode", "supersede", 3),)),
        "manage_server",
        True,
        _setting("render_mode", "supersede"),
    ),
    Command(
        "/memory-settings cadence",
        "memory-settings",
        _settings("cadence", options=(option("turns", 2, 4),)),
        "manage_server",
        True,
        _setting("refresh_cadence", 2),
    ),
    Command(
        "/memory-settings crude-count",
        "memory-settings",
        _settings("crude-count", options=(option("count", 2, 4),)),
        "manage_server",
        True,
        _setting("crude_message_count", 2),
    ),
    Command(
        "/memory-settings token-budget",
        "memory-settings",
        _settings("token-budget", options=(option("tokens", 900, 4),)),
        "manage_server",
        True,
        _setting("context_token_budget", 900),
    ),
    Command(
        "/memory-settings language",
        "memory-settings",
        _settings("language", options=(option("language", "ja", 3),)),
        "manage_server",
        True,
        _setting("language", "ja"),
    ),
    Command(
        "/memory-settings enabled",
        "memory-settings",
        _settings("enabled", options=(option("enabled", False, 5),)),
        "manage_server",
        True,
        _setting("enabled", False),
    ),
    Command(
        "/memory-settings purge-leavers",
        "memory-settings",
        _settings("purge-leavers", options=(option("purge", True, 5),)),
        "administrator",
        True,
        _setting("purge_leavers", True),
    ),
    Command(
        "/memory-settings categories list",
        "memory-settings",
        _settings("categories", "list"),
        "manage_server",
        True,
        _lists_categories,
    ),
    Command(
        "/memory-settings categories add",
        "memory-settings",
        _settings("categories", "add", options=(option("label", "Weather", 3),)),
        "manage_server",
        True,
        _labels(["Mood", "Plans", "Weather"]),
    ),
    Command(
        "/memory-settings categories edit",
        "memory-settings",
        _settings(
            "categories",
            "edit",
            options=(option("label", "Mood", 3), option("new_label", "Atmosphere", 3)),
        ),
        "manage_server",
        True,
        _labels(["Atmosphere", "Plans"]),
    ),
    Command(
        "/memory-settings categories remove",
        "memory-settings",
        _settings("categories", "remove", options=(option("label", "Plans", 3),)),
        "manage_server",
        True,
        _labels(["Mood"]),
    ),
)

CELLS = list(itertools.product(COMMANDS, ACTORS))
MATRIX_SIZE = 22 * 6


def test_the_matrix_is_the_full_product(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command with every actor, none hand-picked."""
    assert len(CELLS) == MATRIX_SIZE
    allowed = sum(not refusal(c.who, c.servers_only, a) for c, a in CELLS)
    with capsys.disabled():
        print(
            f"\npermission matrix: {len(COMMANDS)} commands x {len(ACTORS)} users = "
            f"{len(CELLS)} cells ({allowed} allowed, {len(CELLS) - allowed} refused)"
        )


async def test_the_commands_are_all_the_cog_registers(tmp_path: Path) -> None:
    """A command added to the cog without a row here fails this test."""
    async with harness(tmp_path) as h:
        registered: set[str] = set()
        stack: list[Any] = list(h.bot.tree.get_commands())
        while stack:
            command = stack.pop()
            if isinstance(command, app_commands.Group):
                stack += command.commands
            else:
                registered.add(command.qualified_name)
    assert registered == {c.qualified_name for c in COMMANDS}


@pytest.mark.parametrize(
    ("command", "actor"), CELLS, ids=[f"{c.label}|{a.label}" for c, a in CELLS]
)
async def test_permission(tmp_path: Path, command: Command, actor: Actor) -> None:
    async with harness(tmp_path) as h:
        await populate(h)
        person = replace(_person(h, actor.person), permissions=actor.permissions)
        where = "dm" if actor.in_dm else "general"
        place = places(h, actor.person)[where]
        if command.prepare is not None:
            await command.prepare(h, person.id)
        before = await snapshot(h)
        replies = await h.run(
            command.name, *command.options, person=person, place=place, **command.extra
        )
        await h.memory.flush()
        after = await snapshot(h)
        expected = refusal(command.who, command.servers_only, actor)
        if command.confirm and not expected:
            (preview,) = replies
            assert preview.buttons == ["Confirm", "Cancel"], preview
            assert after == before, "a purge changed memory before it was confirmed"
            replies = [preview, *await h.click(preview, "Confirm", person=person)]
            await h.memory.flush()
            after = await snapshot(h)

    assert replies, "every use gets an answer"
    assert all(r.allowed_mentions == {"parse": []} for r in replies)
    text = "\n".join(r.content for r in replies)
    if expected:
        assert len(replies) == 1 and replies[0].ephemeral, replies
        assert replies[0].buttons == [], "a refused command offered a choice"
        assert any(word.lower() in text.lower() for word in expected), text
        assert after == before, "a refused command changed memory"
    else:
        refused = ("You need", "only be used in a server", "Only the bot's owner", "Sorry")
        assert not any(word in text for word in refused), text
        assert all(r.ephemeral is not command.public for r in replies), replies
        command.effect(h, before, after, Use(actor, where, replies))


# Each purge an actor may ask for, confirmed by them once their permissions in the
# server are gone (a role taken away, the server handed over: the press's payload says so).
CONFIRMS = [(c, a) for c, a in CELLS if c.confirm and not refusal(c.who, c.servers_only, a)]


@pytest.mark.parametrize(
    ("command", "actor"), CONFIRMS, ids=[f"{c.label}|{a.label}" for c, a in CONFIRMS]
)
async def test_a_confirmation_holds_the_presser_to_the_same_rules(
    tmp_path: Path, command: Command, actor: Actor
) -> None:
    """Confirm is judged by the rules of the table as they apply to the press: allowed
    still (the owner, a member purging themselves), it erases; refused, it answers with the
    command's own refusal, alone, and changes nothing."""
    lost = replace(actor, permissions=0)
    expected = refusal(command.who, command.servers_only, lost)
    async with harness(tmp_path) as h:
        await populate(h)
        person = replace(_person(h, actor.person), permissions=actor.permissions)
        place = places(h, actor.person)["dm" if actor.in_dm else "general"]
        if command.prepare is not None:
            await command.prepare(h, person.id)
        before = await snapshot(h)
        (preview,) = await h.run(
            command.name, *command.options, person=person, place=place, **command.extra
        )
        if expected:
            told = await h.run(
                command.name, *command.options, person=person, place=place,
                permissions=0, **command.extra,
            )  # fmt: skip
        pressed = await h.click(preview, "Confirm", person=person, permissions=0)
        await h.memory.flush()
        after = await snapshot(h)

    assert all(r.allowed_mentions == {"parse": []} for r in pressed)
    if expected:
        assert [r.content for r in pressed] == [r.content for r in told], pressed
        assert any(word.lower() in pressed[0].content.lower() for word in expected)
        assert pressed[0].buttons == [] and pressed[0].ephemeral
        assert after == before, "a confirmation refused on its press changed memory"
    else:
        assert pressed[-1].content.startswith("Done"), pressed
        command.effect(h, before, after, Use(actor, "dm" if actor.in_dm else "general",
                                             [preview, *pressed]))  # fmt: skip


def test_every_check_of_a_command_is_one_a_confirmation_runs_again() -> None:
    """A check that says who may use a command must be one ``who_may`` finds (written in
    ``cogs/_utils/checks.py``), or a confirmation of that command would not run it again;
    only cooldowns (how often, not who) are left out."""
    from cogs._utils.checks import who_may
    from cogs.short_term_memory._cog import ShortTermMemoryCog

    commands: list[Any] = list(ShortTermMemoryCog.__cog_app_commands__)
    seen = 0
    while commands:
        command = commands.pop()
        if isinstance(command, app_commands.Group):
            commands += command.commands
            continue
        kept = set(who_may(command))
        for check in command.checks:
            seen += 1
            assert check in kept or "cooldown" in check.__qualname__, (
                f"/{command.qualified_name}: check {check.__qualname__} is not in who_may"
            )
    assert seen > 0
