"""What the bot sends, captured at the last step before the network.

Interaction responses and follow-ups go through discord.py's webhook adapter;
channel messages (``channel.send``, ``message.reply``), typing and history reads
through its HTTP client. Both are replaced by recorders that answer like Discord.
Each message an interaction sends gets an id, so that its edits (of the message a
button was pressed on, too) are recorded as edits of that message, components and all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from discord.webhook.async_ import AsyncWebhookAdapter

from ._payloads import TIMESTAMP, message_payload, snowflake

__all__ = ["OfflineRouteError", "RecordingAdapter", "RecordingHTTP", "Reply"]

EPHEMERAL = 64
# Keeps a long test from growing without bound; history reads see at most this many.
HISTORY_KEPT = 200


class OfflineRouteError(RuntimeError):
    """The bot called a Discord endpoint the offline harness does not answer."""


@dataclass
class Reply:
    """One message the bot sent: an interaction response, a follow-up or a channel message."""

    content: str
    ephemeral: bool
    kind: str
    allowed_mentions: dict[str, Any] | None = None
    channel_id: int | None = None
    # The message this one answers (``message.reply``), when there is one.
    reply_to: int | None = None
    # The message's id (an edit has the id of the message it changed), and its components
    # (action rows of buttons and selects) as sent; an edit without them removed them.
    message_id: int | None = None
    components: list[dict[str, Any]] = field(default_factory=list)

    @property
    def buttons(self) -> list[str]:
        """The labels of the message's buttons, in order."""
        return [button.get("label") or "" for button in self.button_payloads()]

    def button_payloads(self) -> list[dict[str, Any]]:
        """The message's buttons as sent (``label``, ``custom_id``, ``style``, ...)."""
        found: list[dict[str, Any]] = []
        stack = list(reversed(self.components))
        while stack:
            component = stack.pop()
            if component.get("type") == 2:
                found.append(component)
            stack.extend(reversed(component.get("components") or []))
        return found


def _flags(data: dict[str, Any]) -> bool:
    return bool(int(data.get("flags") or 0) & EPHEMERAL)


@dataclass
class RecordingAdapter(AsyncWebhookAdapter):
    """A webhook adapter that records what would be sent and answers like Discord.

    ``originals`` maps an interaction's token to the message its response is (the message
    a pressed button is on, for a component interaction); ``tokens`` maps each message id
    to the token of the interaction that sent it.
    """

    replies: list[Reply] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    originals: dict[str, int] = field(default_factory=dict)
    tokens: dict[int, str] = field(default_factory=dict)
    _ephemeral: dict[int, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    async def request(self, route: Any, session: Any, **kwargs: Any) -> Any:
        payload: dict[str, Any] = kwargs.get("payload") or {}
        self.requests.append((route.method, route.path))
        token = str(route.webhook_token or "")
        if route.path.endswith("/callback"):
            data = payload.get("data") or {}
            kind = payload.get("type")
            if kind in (4, 5):  # a message (deferred: a "thinking" one, recorded once sent)
                message_id = snowflake()
                self.originals[token] = message_id
                self.tokens[message_id] = token
                self._ephemeral[message_id] = _flags(data)
                if kind == 4:
                    self._record(data, "response", message_id)
            elif kind == 7 and token in self.originals:  # the pressed button's message
                self._record(data, "edit", self.originals[token])
            return {
                "interaction": {
                    "id": str(route.webhook_id),
                    "type": 2,
                    "response_message_loading": kind == 5,
                    "response_message_ephemeral": _flags(data),
                }
            }
        if route.method == "POST" and route.path.startswith("/webhooks"):
            message_id = snowflake()
            self.tokens[message_id] = token
            self._ephemeral[message_id] = _flags(payload)
            return self._record(payload, "followup", message_id)
        if route.method == "PATCH" and route.path.startswith("/webhooks"):
            target = str(route.url).rsplit("/", 1)[-1].split("?", 1)[0]
            edited = self.originals.get(token) if target == "@original" else int(target)
            return self._record(payload, "edit", edited)
        return None

    def _record(self, data: dict[str, Any], kind: str, message_id: int | None) -> dict[str, Any]:
        content = data.get("content") or ""
        components = list(data.get("components") or [])
        ephemeral = _flags(data)
        if kind == "edit":
            # An edit changes what it names and keeps the rest of the message.
            before = self.current(message_id)
            ephemeral = self._ephemeral.get(message_id or 0, False)
            if before is not None:
                content = content if "content" in data else before.content
                components = components if "components" in data else before.components
        self.replies.append(
            Reply(
                content=content,
                ephemeral=ephemeral,
                kind=kind,
                allowed_mentions=data.get("allowed_mentions"),
                message_id=message_id,
                components=components,
            )
        )
        sent = message_payload(content, message_id=message_id)
        sent["components"] = components
        sent["flags"] = 64 if ephemeral else 0
        return sent

    def current(self, message_id: int | None) -> Reply | None:
        """The message ``message_id`` as it reads now (its last edit), or None."""
        if message_id is None:
            return None
        return next((r for r in reversed(self.replies) if r.message_id == message_id), None)


class RecordingHTTP:
    """Stands in for ``HTTPClient.request``: records channel messages, serves the history.

    ``history`` holds, per channel, the payloads of what was said there (delivered
    messages and the bot's own), oldest first, so ``channel.history()`` reads them back.
    """

    def __init__(self, replies: list[Reply], bot_user: dict[str, Any]) -> None:
        self.replies = replies
        self.bot_user = bot_user
        self.requests: list[tuple[str, str]] = []
        self.history: dict[int, list[dict[str, Any]]] = defaultdict(list)

    def said(self, channel_id: int, payload: dict[str, Any]) -> None:
        """Remember ``payload`` as said in the channel (for history reads)."""
        kept = self.history[channel_id]
        kept.append(payload)
        del kept[:-HISTORY_KEPT]

    async def request(
        self, route: Any, *, files: Any = None, form: Any = None, **kwargs: Any
    ) -> Any:
        method, path = route.method, route.path
        self.requests.append((method, path))
        channel_id = int(getattr(route, "channel_id", 0) or 0)
        if path == "/channels/{channel_id}/messages" and method == "POST":
            payload = kwargs.get("json") or self._form_payload(form)
            return self._send(channel_id, payload)
        if path == "/channels/{channel_id}/messages" and method == "GET":
            return self._read(channel_id, kwargs.get("params") or {})
        if path == "/channels/{channel_id}/messages/{message_id}" and method == "PATCH":
            payload = kwargs.get("json") or {}
            edited = int(str(route.url).rsplit("/", 1)[-1])
            self.replies.append(
                Reply(payload.get("content") or "", False, "edit", None, channel_id,
                      message_id=edited, components=list(payload.get("components") or []))
            )  # fmt: skip
            return message_payload(payload.get("content") or "", author=self.bot_user,
                                   channel_id=channel_id)  # fmt: skip
        if path == "/channels/{channel_id}/typing" or method in ("DELETE", "PUT"):
            return None
        raise OfflineRouteError(
            f"{method} {path} is not answered offline; the harness answers channel messages "
            "(send, reply, edit, history), typing, deletes and reactions"
        )

    @staticmethod
    def _form_payload(form: Any) -> dict[str, Any]:
        for part in form or ():
            if part.get("name") == "payload_json":
                loaded: dict[str, Any] = json.loads(part["value"])
                return loaded
        return {}

    def _send(self, channel_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        reference = payload.get("message_reference") or {}
        reply_to = int(reference["message_id"]) if reference.get("message_id") else None
        sent = message_payload(
            payload.get("content") or "", author=self.bot_user, channel_id=channel_id
        )
        sent["components"] = list(payload.get("components") or [])
        self.replies.append(
            Reply(
                content=payload.get("content") or "",
                ephemeral=False,
                kind="message",
                allowed_mentions=payload.get("allowed_mentions"),
                channel_id=channel_id,
                reply_to=reply_to,
                message_id=int(sent["id"]),
                components=sent["components"],
            )
        )
        sent["timestamp"] = TIMESTAMP
        self.said(channel_id, sent)
        return sent

    def _read(self, channel_id: int, params: dict[str, Any]) -> list[dict[str, Any]]:
        # Discord answers newest first; ``before`` is a message id.
        found = self.history.get(channel_id, [])
        before = params.get("before")
        if before is not None:
            found = [m for m in found if int(m["id"]) < int(before)]
        limit = int(params.get("limit") or 50)
        return list(reversed(found))[:limit]
