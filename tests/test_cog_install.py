"""The wheel, installed into a fresh venv, loads beside a bot's own ``cogs/`` package.

Builds the wheel from a copy of the sources and installs it into a new venv that sees no
other site-packages, its dependencies from wheels of the ones this environment has
(tests/wheelhouse.py), so it works offline and from inside any venv. Then runs the sample
bot from ``examples/sample_bot`` there, from another working directory: one turn through
the installed extension, an upgrade, then the extension unloaded and loaded by its dotted
name, with the durable memory still there; then the sample bot's own tests, written with
the installed ``discord_stm.testing`` (pytest comes from the wheelhouse too).
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
import wheelhouse
from docs_blocks import blocks, write_files
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

# What the sample bot's own tests need besides the wheel (dev dependencies of this project).
SAMPLE_TEST_TOOLS = ("pytest", "pytest-asyncio")

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide.md"
README = ROOT / "README.md"
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "stm", "cogs")

DRIVER = textwrap.dedent(
    """
    import asyncio, json, sys

    import cogs, discord_stm, stm
    from bot import SampleBot
    from discord_stm.short_term_memory import COG_NAME, EXTENSION
    from discord_stm.testing import channel_payload, guild_payload
    from stm import STMConfig, TurnContext
    from stm._keys import server_key


    async def settle():
        tasks = [t for t in asyncio.all_tasks() if "generation_finished" in t.get_name()]
        await asyncio.gather(*tasks)


    async def main(database):
        out = {"stm": stm.__file__, "discord_stm": discord_stm.__file__, "cogs": cogs.__file__}
        out["extension"] = EXTENSION
        async with SampleBot(STMConfig(database=database)) as bot:
            await bot.setup_hook()
            chat = bot.get_cog("Chat")
            # The server as the gateway brings it: the cog judges who reads which channel
            # from discord.py's cache.
            bot._connection.parse_guild_create(guild_payload(
                100, "home", [channel_payload(c, f"c{c}", 100) for c in (11, 12, 13)]
            ))
            def turn(channel):
                return TurnContext(user_id=1, channel_id=channel, server_id=100,
                                   user_name="ann", channel_name=f"c{channel}", user_text="")
            async def say(ctx, text):
                reply = await chat.answer(ctx, text)
                bot.dispatch("generation_finished", stm.exchange(ctx, reply, user_text=text))
                await settle()
                return reply
            here = turn(11)
            out["reply"] = await say(here, "we plan a trip to Lisbon")
            result = await bot.tools.execute(
                "update_short_term_memory", here, '{"summary": "Ann plans a Lisbon trip"}'
            )
            out["upgrade"] = result.success
            out["elsewhere"] = await say(turn(12), "what was I planning?")
            context = await bot.get_cog(COG_NAME).memory.build_context(turn(13))
            out["context_elsewhere"] = str(context)
            await bot.remove_cog(COG_NAME)
            out["tool_after_unload"] = "update_short_term_memory" in bot.tools
            await bot.load_extension(EXTENSION)
            memory = bot.get_cog(COG_NAME).memory
            entry = await memory.get_entry(server_key(100, 11))
            out["after_reload"] = entry.summary if entry else None
            out["tool_after_reload"] = "update_short_term_memory" in bot.tools
        out["site_packages"] = sorted(
            {getattr(m, "__file__", None) or "" for m in list(sys.modules.values())}
            - {""}
        )
        print(json.dumps(out))


    asyncio.run(main(sys.argv[1]))
    """
)


def _requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    """The unconditional requirements: each distribution and the versions it may have."""
    parsed = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in parsed if r.marker is None}


def _dependencies() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_discord_py_is_bounded_below_its_next_major_version():
    """A discord.py 3 may break the cog's API; it must be a deliberate upgrade. Every 2.x
    from 2.4 on is allowed, the one installed here too."""
    (discord_py,) = [r for r in map(Requirement, _dependencies()) if r.name == "discord.py"]
    allows = discord_py.specifier
    assert allows.contains(importlib.metadata.version("discord.py"))
    for version in ("2.4", "2.4.0", "2.7.1", "2.99.1"):
        assert allows.contains(version), version
    for version in ("2.3.2", "3.0.0a1", "3.0.0rc1", "3.0", "3.1", "4.0"):
        assert not allows.contains(version, prereleases=True), version


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.process
def test_the_wheel_loads_next_to_a_bots_own_cogs_package(tmp_path: Path):
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source, cwd=tmp_path)
    (wheel,) = dist.glob("discord_stm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
        (info,) = {t for t in top if t.endswith(".dist-info")}
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    requires = metadata.get_all("Requires-Dist") or []
    assert _requirements(requires) == _requirements(_dependencies())
    assert top - {info} == {"stm", "discord_stm"}

    # No other site-packages, and no index: every dependency comes from the wheelhouse.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    config = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config
    wheels = tmp_path / "wheels"
    wheelhouse.build([*requires, *SAMPLE_TEST_TOOLS], wheels)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index",
        "--find-links", wheels, wheel, *SAMPLE_TEST_TOOLS, cwd=tmp_path)  # fmt: skip

    sample = tmp_path / "sample_bot"
    shutil.copytree(
        ROOT / "examples" / "sample_bot", sample, ignore=shutil.ignore_patterns("__pycache__")
    )
    (sample / "run_one_turn.py").write_text(DRIVER)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env = {k: v for k, v in env.items() if not k.startswith("STM_")}
    output = run(
        python, "-W", "error::ResourceWarning", sample / "run_one_turn.py", "memory.sqlite3",
        cwd=elsewhere, env=env,
    )  # fmt: skip
    result = json.loads(output.strip().splitlines()[-1])

    site = str(venv.resolve())
    assert result["stm"].startswith(site) and result["discord_stm"].startswith(site)
    outside = [f for f in result["site_packages"] if "-packages" in f and not f.startswith(site)]
    assert not outside, outside  # discord.py and the rest from the venv, nothing else
    assert result["cogs"] == str(sample / "cogs" / "__init__.py")  # the bot's own cogs/
    assert result["extension"] == "discord_stm.short_term_memory"
    assert result["reply"].startswith("You said: we plan a trip to Lisbon")
    assert result["upgrade"] is True
    # Another channel of the server recalls this channel's notes.
    assert "(0 memory note(s)" not in result["elsewhere"]
    assert "Ann plans a Lisbon trip" in result["context_elsewhere"]
    assert 'ann: "we plan a trip to Lisbon"' in result["context_elsewhere"]
    assert result["tool_after_unload"] is False
    assert result["after_reload"] == "Ann plans a Lisbon trip"
    assert result["tool_after_reload"] is True
    assert (elsewhere / "memory.sqlite3").exists()

    # The sample bot's own tests, written with discord_stm.testing, pass against the wheel.
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=sample, env=env)
    assert " passed" in tests.splitlines()[-1] and "failed" not in tests.splitlines()[-1]

    # A bot written from the guide's blocks, and one from the README's with the guide's
    # tests and pytest.ini, pass those tests with pytest against the wheel, as their
    # authors would run them.
    guide = blocks(GUIDE.read_text(encoding="utf-8"), "guide.md")
    readme = blocks(README.read_text(encoding="utf-8"), "README.md")
    for name, pages in (("guide_bot", [guide]), ("readme_bot", [guide, readme])):
        folder = tmp_path / name
        write_files(folder, *pages)
        if name == "readme_bot":
            (folder / "cogs" / "chat.py").unlink()  # the README's bot is one file
        tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=folder, env=env)
        last = tests.splitlines()[-1]
        assert " passed" in last and "failed" not in last, (name, tests)
