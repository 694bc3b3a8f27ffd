"""discord.py extensions of discord-stm; installed from a wheel as the package ``discord_stm``."""
