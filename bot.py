"""The bundled host bot: ``python bot.py`` on Discord, ``--demo`` offline, ``--console`` here."""

from __future__ import annotations

import argparse
import asyncio
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--demo", action="store_true", help="scripted offline demo, no token")
    mode.add_argument("--console", action="store_true", help="chat in this terminal")
    parser.add_argument("--sync", action="store_true", help="sync slash commands on start")
    args = parser.parse_args(argv)
    if args.demo:
        from host.demo import run_demo

        return asyncio.run(run_demo())
    return 0


if __name__ == "__main__":
    sys.exit(main())
