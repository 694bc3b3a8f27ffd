"""``python -m discord_stm.red``: the cog path to give Red, and the commands to load the cog."""

from __future__ import annotations

import sys
from pathlib import Path

COG_PATH = Path(__file__).resolve().parent / "cogpath"

# The one thing this command does is say this; the package itself never prints.
sys.stdout.write(
    f"In Discord, as the bot's owner ([p] is your prefix):\n"
    f"  [p]addpath {COG_PATH}\n"
    f"  [p]load shorttermmemory\n"
    f"  [p]slash enablecog discord_stm\n"
    f"  [p]slash sync\n"
    f"Or start Red with --cog-path {COG_PATH} --load-cogs shorttermmemory\n"
)
