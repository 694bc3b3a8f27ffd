"""bot.py's command line: missing settings named in one line; the console on the pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from host.console import run_console
from stm import STMConfig

ROOT = Path(__file__).resolve().parent.parent


def run_bot(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, str(ROOT / "bot.py"), *args],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_token_is_one_clear_line(tmp_path: Path):
    done = run_bot(tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "DISCORD_TOKEN is not set" in done.stderr


def test_missing_model_is_one_clear_line(tmp_path: Path):
    done = run_bot(tmp_path, DISCORD_TOKEN="x")
    assert done.returncode == 2
    assert "OPENAI_MODEL is not set" in done.stderr.strip().splitlines()[-1]


def test_a_bad_memory_setting_names_its_variable(tmp_path: Path):
    done = run_bot(tmp_path, DISCORD_TOKEN="x", OPENAI_MODEL="m", STM_RENDER_MODE="loud")
    assert done.returncode == 2 and "STM_RENDER_MODE" in done.stderr


async def test_console_chats_switches_place_and_runs_commands(tmp_path: Path):
    lines = iter(
        [
            "hello from general",
            "/in harbor/games",
            "/as carol",
            "/memory-settings cadence 1",
            "/context",
            "/purge-memory alice",
            "/as alice",
            "/memory show",
            "/nonsense",
            "/quit",
        ]
    )
    prompts: list[str] = []
    out: list[str] = []

    async def ask(prompt: str) -> str | None:
        prompts.append(prompt)
        return next(lines, None)

    config = STMConfig(database=str(tmp_path / "console.sqlite3"))
    assert await run_console(config=config, ask=ask, out=out.append) == 0
    text = "\n".join(out)
    assert "scripted stand-in model" in out[0]
    assert 'You said "hello from general"' in text
    assert prompts[1] == "Alice@harbor/general> " and prompts[3] == "Carol@harbor/games> "
    assert "every 1 turns" in text
    assert 'Alice: "hello from general"' in text  # /context shows #general from #games
    assert "erased in this server" in text
    assert "holds no short-term memory about you" in text
    assert "unknown command /nonsense" in text
    assert out[-1] == "Bye."
