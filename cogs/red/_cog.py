"""``RedShortTermMemory``: the cog as Red wants it, and Red's data requests mapped to purges."""

from __future__ import annotations

import logging
from typing import Any

from redbot.core import commands as red_commands
from redbot.core.data_manager import cog_data_path

from stm import STMConfig, ToolRegistry

from ..short_term_memory._cog import COG_NAME, ShortTermMemoryCog

__all__ = [
    "END_USER_DATA_STATEMENT",
    "KEEPS_OPT_OUT",
    "REQUESTERS",
    "RedShortTermMemory",
    "red_config",
]

log = logging.getLogger("discord_stm")

END_USER_DATA_STATEMENT = (
    "This cog keeps short-term memory of conversations with the bot: the last few messages "
    "of each conversation, in the bot's memory only, for at most a few hours, and summaries "
    "the bot's model writes of them, in its database until they expire (a day by default). "
    "It also stores the ids of users who asked not to be remembered. /memory show shows "
    "what it holds about you, /memory forget or [p]mydata forgetme erases it, and "
    "/memory pause stops it remembering you."
)

# Red's data-deletion requests (redbot.core.commands.Cog.red_delete_data_for_user).
REQUESTERS = ("discord_deleted_user", "owner", "user", "user_strict")
# Those after which the user's "do not remember me" stays: the id is what honours it.
KEEPS_OPT_OUT = ("owner", "user", "user_strict")


def red_config() -> STMConfig:
    """``STM_*`` settings; without ``STM_DATABASE``, a file in Red's data folder for the cog."""
    config = STMConfig()
    if "database" in config.model_fields_set:
        return config
    folder = cog_data_path(raw_name=COG_NAME)
    return config.model_copy(update={"database": str(folder / "stm.sqlite3")})


# Without Red installed (mypy in the dev venv) its Cog is Any.
class RedShortTermMemory(ShortTermMemoryCog, red_commands.Cog, name=COG_NAME):  # type: ignore[misc]
    """Short-term memory of conversations, as a Red cog: ``bot.get_cog(COG_NAME).memory``.

    Red bots have no ``bot.tools``: without one the cog keeps its own ``ToolRegistry``
    (``cog.tools``), which a chat cog offers to its model.
    """

    def __init__(
        self, bot: Any, config: STMConfig | None = None, *, tools: ToolRegistry | None = None
    ) -> None:
        chosen = tools if isinstance(tools, ToolRegistry) else ToolRegistry()
        super().__init__(bot, config, tools=chosen)

    async def red_delete_data_for_user(self, *, requester: str, user_id: int) -> None:
        """Erase what is held about ``user_id``, for every request type Red sends.

        Every type purges all of the user's short-term memory (the library's user purge:
        their messages, their own entries, distilled text they contributed to), since
        none of it is needed to run the bot. The "do not remember me" choice, which
        holds only the id, is kept for the user's own requests and the owner's (it is
        what keeps them from being remembered again) and dropped when Discord reports
        the account deleted, where the id itself is to be deleted. Returns once the
        purge is durable; a failure raises, so Red reports the request as failed.
        """
        if requester not in REQUESTERS:
            # Red may add request types; erasing everything is the safe reading of any.
            log.warning("unknown data deletion requester %r: erasing everything", requester)
        await self.memory.clear_short_term_memory_for_user(user_id)
        if requester not in KEEPS_OPT_OUT:
            await self.memory.set_user_opt_out(user_id, False)
        await self.memory.flush()
