"""discord_stm.testing: a bot of one's own, offline, with what a login would have set."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import discord
import pytest
from discord.ext import commands

from cogs.short_term_memory import COG_NAME, ShortTermMemoryCog, turn_context_from_message
from cogs.testing import (
    ListenerFailed,
    OfflineDiscord,
    OfflineRouteError,
    offline_bot,
    option,
    subcommand,
)
from stm import DialogueMessage, GenerationFinished, STMConfig, ToolRegistry

ROOT = Path(__file__).resolve().parent.parent


class Vote(discord.ui.View):
    """Two buttons; a press edits the message (a component interaction's own answer)."""

    @discord.ui.button(label="Tea", custom_id="vote-tea")
    async def tea(self, interaction: discord.Interaction[Any], _: discord.ui.Button[Any]) -> None:
        await interaction.response.edit_message(content=f"{interaction.user.name}: tea", view=None)

    @discord.ui.button(label="Coffee", disabled=True)
    async def coffee(self, interaction: discord.Interaction[Any], _: Any) -> None:
        raise AssertionError("a disabled button cannot be pressed")


class EchoBot(commands.Bot):
    """A bot of one's own: no owner given, no stm_config attribute, its own on_message."""

    def __init__(self, database: Path) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(command_prefix="!", intents=intents)
        self.config = STMConfig(database=str(database))
        self.tools = ToolRegistry()
        self.seen: list[str] = []

    async def setup_hook(self) -> None:
        await self.add_cog(ShortTermMemoryCog(self, self.config, tools=self.tools))

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        if message.content == "explode":
            raise RuntimeError("the listener broke")
        if message.content == "fetch":
            await self.application_info()
            return
        if message.content == "vote":
            await message.reply("Tea or coffee?", view=Vote())
            return
        history = [m.content async for m in message.channel.history(limit=5, before=message)]
        ctx = turn_context_from_message(message)
        self.seen.append(ctx.bot_name)
        reply = f"echo {message.content} (history {len(history)})"
        await message.reply(reply)
        self.dispatch(
            "generation_finished",
            GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(role="user", content=message.content, author_id=ctx.user_id),
                    DialogueMessage(role="assistant", content=reply),
                ],
            ),
        )


async def test_a_message_turn_runs_the_bots_listener_and_captures_its_reply(tmp_path: Path):
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3"), bot_name="Echo") as offline:
        general = offline.server("Harbor", ["general"])["general"]
        ann = offline.person("Ann")
        (reply,) = await offline.say(ann, general, "hello")
        assert reply.content == "echo hello (history 0)"
        assert reply.kind == "message" and reply.channel_id == general.id and reply.reply_to
        # What was said is the channel's history, as Discord would serve it.
        (again,) = await offline.say(ann, general, "again")
        assert again.content == "echo again (history 2)"
        # guild.me is the bot, so the turn context names it.
        assert offline.bot.seen == ["Echo", "Echo"]
        memory = offline.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        (shown,) = await offline.command("memory", subcommand("show"), user=ann, channel=general)
        assert "echo hello" in shown.content and "Echo" in shown.content
        await memory.flush()


async def test_the_owner_is_set_so_owner_only_commands_work(tmp_path: Path):
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3")) as offline:
        general = offline.server("Harbor")["general"]
        ann = offline.person("Ann")
        assert offline.bot.owner_id == offline.owner.id
        assert await offline.bot.is_owner(discord.Object(offline.owner.id))  # type: ignore[arg-type]
        (preview,) = await offline.command(
            "purge-memory",
            option("user", str(ann.id), 6),
            option("everywhere", True, 5),
            user=offline.owner,
            channel=general,
            resolved_users=[ann],
        )
        assert "in every server and DM" in preview.content
        (_, done) = await offline.click(preview, "Confirm", user=offline.owner)
        assert done.content.startswith("Done") and "in every server and DM" in done.content


async def test_a_button_press_is_a_component_interaction_from_where_the_message_is(
    tmp_path: Path,
):
    """A press of a button on a channel message and on an ephemeral answer: the view's
    callback runs, its edit is recorded as an edit of that message, and ``current`` reads
    the message as it is now."""
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3")) as offline:
        general = offline.server("Harbor")["general"]
        ann, mod = offline.person("Ann"), offline.person("Mod", permissions=1 << 3)
        (question,) = await offline.say(ann, general, "vote")
        assert question.buttons == ["Tea", "Coffee"] and question.message_id is not None
        with pytest.raises(ValueError, match="'Coffee' is disabled"):
            await offline.click(question, "Coffee", user=ann)
        with pytest.raises(ValueError, match=r"'Milk' is not there on that message \(buttons: Tea"):
            await offline.click(question, "Milk", user=ann)
        (edit,) = await offline.click(question, "vote-tea", user=ann)  # a custom id works too
        assert (edit.kind, edit.content, edit.buttons) == ("edit", "ann: tea", [])
        assert edit.message_id == question.message_id and edit.channel_id is None
        assert offline.current(question) is edit
        with pytest.raises(ValueError, match="not there"):
            await offline.click(question, "Tea", user=ann)
        # An ephemeral answer's buttons: the press comes from the command's channel.
        (preview,) = await offline.command(
            "purge-memory", option("user", str(ann.id), 6), user=mod, channel=general,
            resolved_users=[ann],
        )  # fmt: skip
        payload = offline.component_payload(preview, "Cancel", user=mod)
        assert (payload["type"], payload["channel_id"], payload["guild_id"]) == (
            3, str(general.id), str(general.guild_id),
        )  # fmt: skip
        assert payload["message"]["id"] == str(preview.message_id)
        assert payload["message"]["flags"] == 64
        (cancelled,) = await offline.deliver(payload)
        assert cancelled.ephemeral and cancelled.content.startswith("Cancelled")


async def test_a_bot_that_has_an_owner_keeps_it(tmp_path: Path):
    bot = EchoBot(tmp_path / "m.sqlite3")
    bot.owner_id = 42
    async with offline_bot(bot) as offline:
        assert offline.bot.owner_id == 42


async def test_a_failing_listener_fails_the_delivery(tmp_path: Path):
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3")) as offline:
        general = offline.server("Harbor")["general"]
        with pytest.raises(ListenerFailed, match="the listener broke"):
            await offline.say(offline.person("Ann"), general, "explode")
        assert len(offline.errors) == 1


async def test_an_endpoint_the_harness_does_not_answer_is_named(tmp_path: Path):
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3"), strict=False) as offline:
        general = offline.server("Harbor")["general"]
        assert await offline.say(offline.person("Ann"), general, "fetch") == []
        (event, error) = offline.errors[0]
        assert event == "on_message" and isinstance(error, OfflineRouteError)
        assert "/oauth2/applications/@me" in str(error)


async def test_a_channel_of_a_server_never_added_is_a_clear_error(tmp_path: Path):
    bot = EchoBot(tmp_path / "m.sqlite3")
    async with offline_bot(bot) as offline:
        other = OfflineDiscord(commands.Bot(command_prefix="!", intents=discord.Intents.none()))
        stray = other.server("Elsewhere")["general"]
        with pytest.raises(RuntimeError, match="add its server first"):
            await offline.say(offline.person("Ann"), stray, "hi")


async def test_permissions_come_from_the_person_unless_given(tmp_path: Path):
    async with offline_bot(EchoBot(tmp_path / "m.sqlite3")) as offline:
        general = offline.server("Harbor")["general"]
        ann = offline.person("Ann")
        admin = offline.person("Mod", permissions=1 << 3)
        target: Any = option("user", str(ann.id), 6)
        (refused,) = await offline.command(
            "purge-memory", target, user=ann, channel=general, resolved_users=[ann]
        )
        assert "Administrator" in refused.content
        (preview,) = await offline.command(
            "purge-memory", target, user=admin, channel=general, resolved_users=[ann]
        )
        assert preview.buttons == ["Confirm", "Cancel"]
        (lent,) = await offline.command(
            "purge-memory", target, user=ann, channel=general, resolved_users=[ann],
            permissions=1 << 3,
        )  # fmt: skip
        assert lent.buttons == ["Confirm", "Cancel"]


def test_the_harness_imports_nothing_of_the_repository_by_its_own_names():
    """Installed it is discord_stm.testing: imports of cogs.* or host.* would not resolve,
    or would reach a bot's own cogs/ package."""
    for path in (ROOT / "cogs" / "testing").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module is not None
                top = node.module.split(".")[0]
                assert top in {"__future__", "discord", "stm", "asyncio", "collections",
                               "contextlib", "dataclasses", "typing", "itertools", "json",
                               "re", "sys"}, (path.name, node.module)  # fmt: skip
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] not in {"cogs", "host", "tests"}, path.name


def test_the_harness_is_in_the_wheel():
    import tomllib

    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "discord_stm.testing" in packages["packages"]
