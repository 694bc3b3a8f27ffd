"""Red-DiscordBot loads the cog with its own ``[p]load``, runs a turn, purges and unloads it.

Red pins typing-extensions, click and discord.py, so it gets a venv of its own: the wheel
is built from a copy of the sources and installed there with its ``red`` extra, in one
resolve, from the package index. ``tests/red_driver.py`` then runs a real, not logged-in
``Red`` (JSON storage in a temporary folder) through discord_stm.testing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cogs.short_term_memory import COG_NAME

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "stm", "cogs")

pytestmark = pytest.mark.process


def run(*args: str | Path, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env = {k: v for k, v in env.items() if not k.startswith("STM_")}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def red_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the wheel and Red-DiscordBot, resolved together."""
    tmp = tmp_path_factory.mktemp("red")
    source = tmp / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    dist = tmp / "dist"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source, cwd=tmp)
    (wheel,) = dist.glob("discord_stm-*.whl")
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
        f"discord-stm[red] @ {wheel.as_uri()}", cwd=tmp)  # fmt: skip
    return python


def test_red_loads_the_cog_runs_a_turn_purges_and_unloads(red_python: Path, tmp_path: Path):
    cog_path = run(
        red_python, "-c", "import discord_stm.red.__main__", cwd=tmp_path
    ).split("--cog-path ")[1].split()[0]  # fmt: skip
    assert cog_path.startswith(str(red_python.parent.parent))  # inside the installed package
    output = run(red_python, ROOT / "tests" / "red_driver.py", tmp_path / "red", cog_path,
                 cwd=tmp_path, timeout=300)  # fmt: skip
    seen = json.loads(output.strip().splitlines()[-1])

    assert seen["load"] == ["Loaded `shorttermmemory`."]
    assert seen["cog"] == "discord_stm.red._cog.RedShortTermMemory"  # found by COG_NAME
    assert "/memory forget" in seen["statement"] and "[p]mydata forgetme" in seen["statement"]
    assert seen["database"] == str(tmp_path / "red" / "cogs" / COG_NAME / "stm.sqlite3")
    # Red keeps app commands off until the owner enables them, as the guide says.
    assert seen["slash_before"] is False and seen["enable"][0].startswith("Enabled 4 commands")
    assert seen["slash_after"] == ["memory", "memory-settings", "purge-memory", "refresh"]

    assert seen["upgrade"] is True
    assert "Ann plans a Lisbon trip" in seen["context_elsewhere"]
    assert 'Ann: "we plan a trip to Lisbon"' in seen["context_elsewhere"]
    assert "Ann plans a Lisbon trip" in seen["show"][0]

    deletion = seen["deletion"]
    assert all(not d["failed_cogs"] and not d["unhandled"] for d in deletion.values())
    # A deleted account's id goes too; a user's own or the owner's request keeps the pause.
    assert deletion["discord_deleted_user"]["opted_out"] is False
    assert deletion["user_strict"]["opted_out"] is True
    assert deletion["owner"]["opted_out"] is True
    assert seen["after_purge_entry"] in (None, [None, 0])  # Ann's words and her summary gone
    (after_purge_show,) = seen["after_purge_show"]
    assert after_purge_show.startswith("Red holds no short-term memory about you in this channel.")
    assert "only where everyone who can read that channel can read this one" in after_purge_show

    assert seen["unload"] == ["The following package was unloaded: `shorttermmemory`."]
    assert seen["after_unload"] == {
        "cog": False,
        "memory_closed": True,
        "tool": False,
        "slash": False,
    }
