"""Test a bot with the short-term memory offline: gateway payloads in, what it sends captured.

``offline_bot(bot)`` starts a bot of your own without a token or network (its
``setup_hook`` runs as at login) and gives an ``OfflineDiscord``: add servers and
people, ``await offline.say(person, channel, text)`` delivers a message (your
``on_message`` runs; replies come back), ``await offline.command("memory",
subcommand("show"), user=person, channel=channel)`` uses a slash command, and
``await offline.click(reply, "Confirm", user=person)`` presses a button of a message the
bot sent (a component interaction; its edits of that message come back, and
``offline.current(reply)`` reads the message as it is now). Replies are ``Reply``
objects (``buttons`` lists a message's button labels). Imports only discord.py and ``stm``.
"""

from ._capture import OfflineRouteError, RecordingAdapter, RecordingHTTP, Reply
from ._offline import (
    ADMINISTRATOR,
    MANAGE_GUILD,
    ListenerFailed,
    OfflineDiscord,
    Person,
    Place,
    Said,
    offline_bot,
)
from ._payloads import (
    APPLICATION_ID,
    TIMESTAMP,
    VIEW_CHANNEL,
    channel_payload,
    dm_channel_payload,
    guild_payload,
    member_payload,
    message_payload,
    option,
    snowflake,
    subcommand,
    user_payload,
)

__all__ = [
    "ADMINISTRATOR",
    "APPLICATION_ID",
    "MANAGE_GUILD",
    "TIMESTAMP",
    "VIEW_CHANNEL",
    "ListenerFailed",
    "OfflineDiscord",
    "OfflineRouteError",
    "Person",
    "Place",
    "RecordingAdapter",
    "RecordingHTTP",
    "Reply",
    "Said",
    "channel_payload",
    "dm_channel_payload",
    "guild_payload",
    "member_payload",
    "message_payload",
    "offline_bot",
    "option",
    "snowflake",
    "subcommand",
    "user_payload",
]
