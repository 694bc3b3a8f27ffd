"""The bundled host bot: ``python bot.py`` on Discord, ``--demo`` offline, ``--console`` here.

Settings: DISCORD_TOKEN, OPENAI_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY, and the
STM_* variables of the memory (see stm.STMConfig), from the environment or a ``.env``
file in the working directory.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from stm import ConfigError, SchemaVersionError, STMConfig, StoreError
from stm.store import check_database

PROG = "bot.py"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An LLM chat bot with short-term memory.",
        epilog="Settings come from DISCORD_TOKEN, OPENAI_MODEL, OPENAI_BASE_URL, "
        "OPENAI_API_KEY and STM_* environment variables, or a .env file here.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--demo", action="store_true", help="a scripted offline demo, no token")
    mode.add_argument("--console", action="store_true", help="chat in this terminal")
    parser.add_argument(
        "--sync", action="store_true", help="sync the slash commands with Discord on start"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="the console logs at INFO with tracebacks of model failures (-vv: DEBUG, "
        "with the HTTP client's requests)",
    )
    parser.add_argument(
        "--log-level", help="logging level (default INFO on Discord, WARNING in the console)"
    )
    return parser


class _NoVoiceWarnings(logging.Filter):
    """discord.py warns at every start that voice libraries are missing; this bot has no voice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "voice will NOT be supported" not in record.getMessage()


HTTP_LOGGERS = ("httpx", "httpcore", "openai")


def _log_level(args: argparse.Namespace) -> str | int:
    if args.log_level:
        return str(args.log_level).upper()
    if args.demo:
        return logging.WARNING
    levels = (logging.WARNING if args.console else logging.INFO, logging.INFO, logging.DEBUG)
    # The console's terminal is the chat: warnings only, unless asked for more.
    return levels[min(args.verbose, 2)]


def startup_problem(exc: BaseException) -> str | None:
    """One line for a start-up failure the operator can fix, or None for anything else.

    discord.py wraps what an extension's set-up raises; the cause is looked up through it.
    """
    from host.env import SettingMissing

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SchemaVersionError):
            return f"{seen} (STM_DATABASE)"
        if isinstance(seen, StoreError):
            return (
                f"{seen}; set STM_DATABASE to a file in a folder this user can write to, "
                "or move the file away to start afresh"
            )
        if isinstance(seen, ConfigError | SettingMissing):
            return str(seen)
        seen = getattr(seen, "original", None) or seen.__cause__
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the chosen mode; returns the exit status."""
    args = _parser().parse_args(argv)
    # Imported here so --help stays instant.
    from host.demo import run_demo
    from host.env import discord_token, load_dotenv, model_from_env
    from host.shutdown import run_until_signalled

    logging.basicConfig(
        level=_log_level(args), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("discord.client").addFilter(_NoVoiceWarnings())
    if args.console and args.verbose < 2:
        # A line per model request would land in the middle of the conversation.
        for name in HTTP_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        if args.demo:
            # The demo's memory lives in a temporary folder and ignores the STM_* settings.
            return asyncio.run(run_demo())
        load_dotenv()
        config = STMConfig()
        if args.console:
            from host.console import run_console

            console = run_console(model_from_env(required=False), config=config)
            return asyncio.run(run_until_signalled(console))
        from host.discord_bot import run_bot

        token = discord_token()
        model = model_from_env()
        assert model is not None
        asyncio.run(check_database(config))
        return asyncio.run(run_until_signalled(run_bot(token, model, config, sync=args.sync)))
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        problem = startup_problem(exc)
        if problem is None:
            raise
        print(f"{PROG}: {' '.join(problem.split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
