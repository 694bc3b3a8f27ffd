"""bot.py's command line: missing settings named in one line; the console on the pipeline."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from aiohttp import web

from bot import main as bot_main
from host.console import run_console
from host.models import OpenAIChatModel
from stm import STMConfig

ROOT = Path(__file__).resolve().parent.parent


def run_bot(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "OPENAI_", "STM_"))
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "bot.py"), *args],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_missing_token_is_one_clear_line(tmp_path: Path):
    done = run_bot(tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "DISCORD_TOKEN is not set" in done.stderr


@pytest.mark.process
def test_missing_model_is_one_clear_line(tmp_path: Path):
    done = run_bot(tmp_path, DISCORD_TOKEN="x")
    assert done.returncode == 2
    assert "OPENAI_MODEL is not set" in done.stderr.strip().splitlines()[-1]


@pytest.mark.process
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
            "/press confirm",
            "/purge-memory alice",
            "/press Milk",
            "/press confirm",
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
    assert "cannot do that: the bot's last answers have no buttons" in text
    assert "[buttons: Confirm | Cancel] (/press BUTTON)" in text
    assert "unknown button 'Milk': one of Confirm, Cancel" in text
    assert "[only you see this, the message now reads] Done: short-term memory about " in text
    assert "erased in this server" in text
    assert "holds no short-term memory about you" in text
    assert "unknown command /nonsense" in text
    assert out[-1] == "Bye."


def _garbage(folder: Path) -> Path:
    path = folder / "stm.sqlite3"
    path.write_bytes(b"this is not a database at all" * 100)
    return path


def _under_a_file(folder: Path) -> Path:
    (folder / "plain-file").write_text("x")
    return folder / "plain-file" / "stm.sqlite3"


def _newer_schema(folder: Path) -> Path:
    path = folder / "stm.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    return path


BAD_DATABASES = {"garbage": _garbage, "under a file": _under_a_file, "newer": _newer_schema}


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() == 0:  # root ignores permission bits; the immutable flag binds it too
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"cannot make {folder} immutable (chattr +i): {done.stderr.strip()}")
        undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    yield folder
    subprocess.run(undo, check=True)


def _assert_one_line_about(done: subprocess.CompletedProcess[str], path: Path) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("bot.py: ") and str(path) in lines[0]
    assert "STM_DATABASE" in lines[0]


MODES = {
    "console": (["--console"], {}),
    "discord": ([], {"DISCORD_TOKEN": "x", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": "http://h"}),
}


def _start_in_process(
    args: list[str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> subprocess.CompletedProcess[str]:
    """``bot.py`` run in this process, for speed; ``test_dotenv_...`` runs the real command."""
    for name in ("DISCORD_TOKEN", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    status = bot_main(args)
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, captured.out, captured.err)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("bad", sorted(BAD_DATABASES))
def test_a_database_that_cannot_be_used_stops_the_start_in_one_line(
    tmp_path: Path,
    mode: str,
    bad: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    path = BAD_DATABASES[bad](tmp_path)
    args, env = MODES[mode]
    monkeypatch.chdir(tmp_path)
    done = _start_in_process(args, {**env, "STM_DATABASE": str(path)}, monkeypatch, capsys)
    _assert_one_line_about(done, path)


@pytest.mark.process
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_read_only_folder_stops_the_start_in_one_line(
    tmp_path: Path,
    read_only_folder: Path,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    path = read_only_folder / "stm.sqlite3"
    args, env = MODES[mode]
    monkeypatch.chdir(tmp_path)
    done = _start_in_process(args, {**env, "STM_DATABASE": str(path)}, monkeypatch, capsys)
    _assert_one_line_about(done, path)


def test_the_demo_ignores_the_operators_memory_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(tmp_path)
    env = {"STM_DATABASE": str(_under_a_file(tmp_path)), "STM_CRUDE_TTL_HOURS": "not a number"}
    done = _start_in_process(["--demo"], env, monkeypatch, capsys)
    assert done.returncode == 0, done.stderr
    assert "Demo finished." in done.stdout and "Traceback" not in done.stderr


@pytest.mark.process
def test_dotenv_covers_the_bots_own_variables(tmp_path: Path):
    (tmp_path / ".env").write_text(
        "DISCORD_TOKEN=from-dotenv\nOPENAI_MODEL=m\nOPENAI_BASE_URL=http://h\n"
        f"STM_DATABASE={_garbage(tmp_path)}\n"
    )
    # Past the token and the model, the start reaches the database named in the same file.
    _assert_one_line_about(run_bot(tmp_path), tmp_path / "stm.sqlite3")


@pytest.mark.process
def test_no_voice_library_warnings_at_start(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bot.py"), "--console"],
        cwd=tmp_path,
        input="/quit\n",
        env={**os.environ, "STM_DATABASE": str(tmp_path / "stm.sqlite3")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Bye." in done.stdout
    assert "voice will not be supported" not in done.stderr.lower()


@pytest.fixture
def unreachable_model() -> Iterator[OpenAIChatModel]:
    """The real client on an endpoint whose port refuses connections: a socket bound to
    it but not listening holds the port for the test, so nothing else can answer there."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
        )
        yield OpenAIChatModel(client, "down")


async def _console(tmp_path: Path, lines: list[str], model: object = None) -> list[str]:
    given = iter(lines)
    out: list[str] = []

    async def ask(prompt: str) -> str | None:
        out.append(prompt)
        return next(given, None)

    config = STMConfig(database=str(tmp_path / "console.sqlite3"))
    assert await run_console(model, config=config, ask=ask, out=out.append) == 0  # type: ignore[arg-type]
    return out


async def test_console_survives_model_errors(tmp_path: Path, unreachable_model: OpenAIChatModel):
    out = await _console(tmp_path, ["hello", "hello again", "/memory show"], unreachable_model)
    failures = [line for line in out if line.startswith("(the model could not answer")]
    assert len(failures) == 2
    assert "APIConnectionError" in failures[0]
    assert out[-1] == "Bye."


async def test_console_arguments_are_strict_and_explained(tmp_path: Path):
    out = await _console(
        tmp_path,
        [
            "/as dan",
            "/memory-settings enabled maybe",
            "/memory-settings cadence often",
            "/memory-settings categories add Trip plans and more",
            '/memory-settings categories add "Trip plans" "Where and when"',
            "/as zed",
            "/memory",
            "/nonsense",
            "/persona x",
            "/help",
        ],
    )
    text = "\n".join(out)
    assert "enabled takes true or false, not 'maybe'" in text
    assert "Short-term memory is **off**" not in text
    assert "cadence" not in text or "turns takes a whole number, not 'often'" in text
    assert "too many words" in text
    assert "**Trip plans**: Where and when" in text
    assert "unknown person 'zed'" in text
    assert "missing argument: /memory show|forget|pause|resume" in text
    assert "unknown command /nonsense" in text
    assert "persona takes a whole number, not 'x'" in text
    assert 'categories add "Trip plans" "Where and when"' in text  # /help shows how to quote
    refusals = [line for line in out if line.startswith("cannot do that")]
    assert len(refusals) == 7 and all("\n" not in line for line in refusals)
    assert "invalid literal" not in text and "Traceback" not in text


async def test_as_in_a_dm_moves_to_that_users_dm(tmp_path: Path):
    out = await _console(
        tmp_path, ["/in dm", "/as bob", "a secret for the bot", "/memory show", "/as alice"]
    )
    assert "Bob@dm> " in out and out.count("Alice@dm> ") == 2  # before and after bob
    show = next(line for line in out if "only you see this" in line)
    assert "a secret for the bot" in show  # bob's own DM, where he spoke


async def _console_process(
    tmp_path: Path, base_url: str, *flags: str, lines: str = "hello\n/quit\n"
) -> tuple[str, str]:
    """``bot.py --console`` as a process against ``base_url``, fed ``lines``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "STM_"))}
    env = {**base, "OPENAI_MODEL": "local", "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "k",
           "STM_DATABASE": str(tmp_path / "console.sqlite3")}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "--console", *flags,
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(lines.encode()), 120)
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.process
async def test_a_model_that_cannot_be_reached_is_one_line_in_the_console(tmp_path: Path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    out, err = await _console_process(tmp_path, url)
    failures = [line for line in out.splitlines() if "(the model could not answer" in line]
    assert len(failures) == 1 and "APIConnectionError" in failures[0]
    assert "Traceback" not in err and "Traceback" not in out
    # -v asks for the traceback.
    _, verbose = await _console_process(tmp_path, url, "-v")
    assert "Traceback" in verbose and "APIConnectionError" in verbose


@pytest.mark.process
async def test_the_http_clients_request_log_stays_out_of_the_console(tmp_path: Path):
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "local",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Hi from the model."}}],
        })  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        out, err = await _console_process(tmp_path, url)
        assert "Assistant: Hi from the model." in out
        assert "HTTP Request" not in out + err
        # Asked for everything (-vv), the requests are logged.
        _, debug = await _console_process(tmp_path, url, "-vv")
        assert "HTTP Request: POST" in debug
    finally:
        await runner.cleanup()


async def test_the_start_up_check_creates_nothing_so_the_real_open_starts_empty(tmp_path: Path):
    """bot.py checks the database before logging in; the cog's open is the first one."""
    from stm import ShortTermMemory
    from stm.store import check_database

    database = tmp_path / "data" / "stm.sqlite3"
    config = STMConfig(database=str(database))
    await check_database(config)
    assert not database.exists() and not database.parent.exists()
    async with ShortTermMemory.open(config) as memory:
        assert memory.store.empty_at_open  # first turns need not read the database
    await check_database(config)  # an existing database: read-only, and fine


async def test_the_start_up_check_refuses_a_place_no_file_can_be_made(tmp_path: Path):
    from bot import startup_problem
    from stm import StoreError
    from stm.store import check_database

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for where in (blocker / "stm.sqlite3", tmp_path):
        with pytest.raises(StoreError) as caught:
            await check_database(STMConfig(database=str(where)))
        problem = startup_problem(caught.value)
        assert problem is not None and "STM_DATABASE" in problem
    assert blocker.read_text() == "not a folder"
