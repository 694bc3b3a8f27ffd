"""What the bot sends, captured at the last step before the network.

Interaction responses and follow-ups go through discord.py's webhook adapter;
channel messages (``channel.send``, ``message.reply``), typing and history reads
through its HTTP client. Both are replaced by recorders that answer like Discord.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from discord.webhook.async_ import AsyncWebhookAdapter

from .payloads import TIMESTAMP, message_payload

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


def _flags(data: dict[str, Any]) -> bool:
    return bool(int(data.get("flags") or 0) & EPHEMERAL)


@dataclass
class RecordingAdapter(AsyncWebhookAdapter):
    """A webhook adapter that records what would be sent and answers like Discord."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    async def request(self, route: Any, session: Any, **kwargs: Any) -> Any:
        payload: dict[str, Any] = kwargs.get("payload") or {}
        self.requests.append((route.method, route.path))
        if route.path.endswith("/callback"):
            data = payload.get("data") or {}
            if payload.get("type") == 4:
                self._record(data, "response")
            return {
                "interaction": {
                    "id": str(route.webhook_id),
                    "type": 2,
                    "response_message_loading": payload.get("type") == 5,
                    "response_message_ephemeral": _flags(data),
                }
            }
        if route.method in ("POST", "PATCH") and route.path.startswith("/webhooks"):
            self._record(payload, "followup" if route.method == "POST" else "edit")
            return message_payload(payload.get("content") or "")
        return None

    def _record(self, data: dict[str, Any], kind: str) -> None:
        self.replies.append(
            Reply(
                content=data.get("content") or "",
                ephemeral=_flags(data),
                kind=kind,
                allowed_mentions=data.get("allowed_mentions"),
            )
        )


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
            self.replies.append(
                Reply(payload.get("content") or "", False, "edit", None, channel_id)
            )
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
        self.replies.append(
            Reply(
                content=payload.get("content") or "",
                ephemeral=False,
                kind="message",
                allowed_mentions=payload.get("allowed_mentions"),
                channel_id=channel_id,
                reply_to=reply_to,
            )
        )
        sent = message_payload(
            payload.get("content") or "", author=self.bot_user, channel_id=channel_id
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
