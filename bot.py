"""The bundled host bot: ``python bot.py`` on Discord, ``--demo`` offline, ``--console`` here.

Settings: DISCORD_TOKEN, OPENAI_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY, and the
STM_* variables of the memory (see stm.STMConfig).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from stm import ConfigError, STMConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="An LLM chat bot with short-term memory.",
        epilog="Settings come from DISCORD_TOKEN, OPENAI_MODEL, OPENAI_BASE_URL, "
        "OPENAI_API_KEY and STM_* environment variables.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--demo", action="store_true", help="a scripted offline demo, no token")
    mode.add_argument("--console", action="store_true", help="chat in this terminal")
    parser.add_argument(
        "--sync", action="store_true", help="sync the slash commands with Discord on start"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chosen mode; returns the exit status."""
    args = _parser().parse_args(argv)
    # Imported here so --help stays instant.
    from host.demo import run_demo
    from host.env import SettingMissing, discord_token, model_from_env
    from host.shutdown import run_until_signalled

    if args.demo:
        logging.basicConfig(level=logging.WARNING)
        # The demo never uses voice; discord.py's warnings about it would only distract.
        logging.getLogger("discord.client").setLevel(logging.ERROR)
        return asyncio.run(run_demo())
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = STMConfig()
        if args.console:
            from host.console import run_console

            console = run_console(model_from_env(required=False), config=config)
            return asyncio.run(run_until_signalled(console))
        from host.discord_bot import run_bot

        token = discord_token()
        model = model_from_env()
        assert model is not None
        return asyncio.run(run_until_signalled(run_bot(token, model, config, sync=args.sync)))
    except (SettingMissing, ConfigError) as exc:
        print(f"bot.py: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
