"""What Red's ``[p]load shorttermmemory`` loads: the installed ``discord_stm.red`` cog."""

from discord_stm.red import __red_end_user_data_statement__, setup, teardown

__all__ = ["__red_end_user_data_statement__", "setup", "teardown"]
