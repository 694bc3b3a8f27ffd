"""The turn's input types (``TurnContext``, ``DialogueMessage``, ``GenerationFinished``),
checked by hand where a host hands them in.

A host builds these three on every turn, and that is the whole cost of the turn
path that is not memory work: as pydantic models they took longer to build than
capturing and rendering the turn did. Here each is a plain class whose
constructor checks every field with a few type and range tests, and whose
assignments are checked the same way (a host that changes a field after
construction cannot slip past the checks). Bad input raises ``ValueError``, as
the models did. The library's own objects (the cache's messages, entries) are
built from these once checked and are not checked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from ._ids import ID_LIMIT, MAX_NAME_LENGTH, check_bool, check_id, check_optional_id
from ._provenance import Shown
from ._text import clean_name

__all__ = ["DialogueMessage", "GenerationFinished", "TurnContext"]

_id = check_id
_optional_id = check_optional_id
_flag = check_bool
_now = time.time
_set = object.__setattr__


def _text(value: object, what: str) -> str:
    if type(value) is not str:
        if isinstance(value, str):
            return str(value)  # a str subclass: kept as the plain text it holds
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    return value


def _name(value: object, what: str) -> str:
    """One printable line of at most ``MAX_NAME_LENGTH`` characters, cleaned like a tool
    argument: line breaks become spaces, and the character policy applies (``stm._text``)."""
    return clean_name(_text(value, what), MAX_NAME_LENGTH)


def _optional_name(value: object, what: str) -> str | None:
    return None if value is None else _name(value, what)


def _unknown(cls: type, names: Iterable[str]) -> ValueError:
    return ValueError(f"{cls.__name__} has no field {', '.join(sorted(names))}")


def _no_field(value: object, what: str) -> object:
    """The marker of a name that is no field: looked up, never called."""
    raise AssertionError(what)


class _Plain:
    """Fields in the instance dict, set in one step by the constructor; assignments checked."""

    __slots__ = ("__dict__",)
    # field -> check; the checks of assignments (the constructor inlines its own).
    _checks: ClassVar[dict[str, Callable[[Any, str], Any]]] = {}
    _frozen: ClassVar[bool] = False

    def __setattr__(self, name: str, value: object) -> None:
        check = self._checks.get(name)
        if check is None:
            raise _unknown(type(self), [name])
        if self._frozen:
            raise ValueError(f"{type(self).__name__} is frozen: {name} cannot be changed")
        self.__dict__[name] = check(value, name)

    def __delattr__(self, name: str) -> None:
        raise ValueError(f"{type(self).__name__}.{name} cannot be deleted")

    def model_dump(
        self, *, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The fields as a dict (``include``/``exclude`` field names), as pydantic gives it."""
        names = [n for n in self._checks if include is None or n in include]
        if exclude is not None:
            names = [n for n in names if n not in exclude]
        return {name: getattr(self, name) for name in names}

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """A shallow copy (the library's notes about it included, as pydantic copied private
        attributes), with the fields in ``update`` changed and checked."""
        del deep  # every field is an immutable value, or (an event's) replaced as a whole
        copy = object.__new__(type(self))
        state = dict(self.__dict__)
        for name, value in (update or {}).items():
            check = self._checks.get(name)
            if check is None:
                raise _unknown(type(self), [name])
            state[name] = check(value, name)
        object.__setattr__(copy, "__dict__", state)
        return copy

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.model_dump().items())
        return f"{type(self).__name__}({fields})"

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "__dict__", dict(state))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Lets pydantic models hold these (MemoryEntry holds DialogueMessages).
        def coerce(value: object) -> Any:
            if isinstance(value, cls):
                return value
            if isinstance(value, dict):
                return cls(**value)
            raise ValueError(f"expected a {cls.__name__}, not {type(value).__name__}")

        return core_schema.no_info_plain_validator_function(
            coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.model_dump()
            ),
        )


class TurnContext(_Plain):
    """Who and where one generation happens, and that generation's flags."""

    __slots__ = ()
    user_id: int
    channel_id: int
    server_id: int | None
    persona_id: int | None
    user_name: str
    bot_name: str
    channel_name: str | None
    server_name: str | None
    parent_channel_id: int | None
    channel_is_private: bool
    user_text: str
    explicit_memory_intent: bool
    disable_short_term_memory_update: bool
    # The Discord message that triggered the turn, when there was one.
    message_id: int | None
    server_locale: str | None
    # The library's own notes about this turn: private attributes, defaults here, set on
    # the instance when first noted (and copied with it, as pydantic copied them). Each
    # has one writer, named here; everything else only reads it.
    # How many deletions the memory had made when this turn first reached it
    # (written by stm/_readthrough.py, ReadThrough.mark_turn_start).
    _deletion_seq: int | None = None
    # The change feed's position this process's cache reflected when the turn began
    # (stm/_follower.py, Follower.mark_turn_start).
    _feed_position: int | None = None
    # (gate, text, answer) of the intent check of this turn's text: asked once per turn
    # (stm/_tool/upgrade.py).
    _intent: tuple[object, str, bool] | None = None
    # What this turn's prompt showed from memory, which its upgrade credits
    # (stm/_readthrough.py, ReadThrough.note_shown), and whether an upgrade of this turn is
    # in flight, one per turn
    # (stm/_tool/upgrade.py).
    _shown: Shown | None = None
    _upgrading: bool = False
    # The turn's scope keys and recall group, with the ids they were made from
    # (stm/_readthrough.py, turn_scope).
    _keys: tuple[Any, ...] | None = None
    _notes: ClassVar[frozenset[str]] = frozenset(
        {"_deletion_seq", "_feed_position", "_intent", "_keys", "_shown", "_upgrading"}
    )

    _checks: ClassVar[dict[str, Callable[[Any, str], Any]]] = {
        "user_id": _id,
        "channel_id": _id,
        "server_id": _optional_id,
        "persona_id": _optional_id,
        "user_name": _name,
        "bot_name": _name,
        "channel_name": _optional_name,
        "server_name": _optional_name,
        "parent_channel_id": _optional_id,
        "channel_is_private": _flag,
        "user_text": _text,
        "explicit_memory_intent": _flag,
        "disable_short_term_memory_update": _flag,
        "message_id": _optional_id,
        "server_locale": _optional_name,
    }

    def __init__(
        self,
        *,
        user_id: int,
        channel_id: int,
        server_id: int | None = None,
        persona_id: int | None = None,
        user_name: str = "",
        bot_name: str = "Assistant",
        channel_name: str | None = None,
        server_name: str | None = None,
        parent_channel_id: int | None = None,
        channel_is_private: bool = False,
        user_text: str = "",
        explicit_memory_intent: bool = False,
        disable_short_term_memory_update: bool = False,
        message_id: int | None = None,
        server_locale: str | None = None,
        **unknown: object,
    ) -> None:
        if unknown:
            raise _unknown(TurnContext, unknown)
        if message_id is not None:
            _id(message_id, "message_id")
        # The checks of _checks, inlined for the common case: this runs on every turn.
        if type(user_id) is not int or not 0 <= user_id < ID_LIMIT:
            _id(user_id, "user_id")
        if type(channel_id) is not int or not 0 <= channel_id < ID_LIMIT:
            _id(channel_id, "channel_id")
        if server_id is not None and (type(server_id) is not int or not 0 <= server_id < ID_LIMIT):
            _id(server_id, "server_id")
        if persona_id is not None:
            _id(persona_id, "persona_id")
        if parent_channel_id is not None:
            _id(parent_channel_id, "parent_channel_id")
        # A name that is a str, short, ASCII and printable is clean as it is (see
        # clean_name); any other goes through the character policy.
        if not (
            type(user_name) is str
            and len(user_name) <= MAX_NAME_LENGTH
            and user_name.isascii()
            and user_name.isprintable()
        ):
            user_name = _name(user_name, "user_name")
        if bot_name != "Assistant" or type(bot_name) is not str:
            bot_name = _name(bot_name, "bot_name")
        if channel_name is not None and not (
            type(channel_name) is str
            and len(channel_name) <= MAX_NAME_LENGTH
            and channel_name.isascii()
            and channel_name.isprintable()
        ):
            channel_name = _name(channel_name, "channel_name")
        if server_name is not None and not (
            type(server_name) is str
            and len(server_name) <= MAX_NAME_LENGTH
            and server_name.isascii()
            and server_name.isprintable()
        ):
            server_name = _name(server_name, "server_name")
        if type(user_text) is not str:
            user_text = _text(user_text, "user_text")
        if server_locale is not None:
            server_locale = _optional_name(server_locale, "server_locale")
        if (
            type(channel_is_private) is not bool
            or type(explicit_memory_intent) is not bool
            or type(disable_short_term_memory_update) is not bool
        ):
            _flag(channel_is_private, "channel_is_private")
            _flag(explicit_memory_intent, "explicit_memory_intent")
            _flag(disable_short_term_memory_update, "disable_short_term_memory_update")
        # One dict in one step: a checked assignment per field would cost as much again.
        _set(
            self,
            "__dict__",
            {
                "user_id": user_id,
                "channel_id": channel_id,
                "server_id": server_id,
                "persona_id": persona_id,
                "user_name": user_name,
                "bot_name": bot_name,
                "channel_name": channel_name,
                "server_name": server_name,
                "parent_channel_id": parent_channel_id,
                "channel_is_private": channel_is_private,
                "user_text": user_text,
                "explicit_memory_intent": explicit_memory_intent,
                "disable_short_term_memory_update": disable_short_term_memory_update,
                "message_id": message_id,
                "server_locale": server_locale,
            },
        )

    def __setattr__(self, name: str, value: object) -> None:
        # One look-up, and a flag set to a bool without a call: a host sets
        # explicit_memory_intent on every turn, and the library sets its notes.
        check = _CONTEXT_SETTERS.get(name, _no_field)
        if check is None or (check is _flag and type(value) is bool):
            self.__dict__[name] = value
        elif check is _no_field:
            raise _unknown(TurnContext, [name])
        else:
            self.__dict__[name] = check(value, name)

    @property
    def is_dm(self) -> bool:
        """True when the turn happens in a direct message."""
        return self.server_id is None


# Each field's check, and None for each of the library's notes (stored as given).
_CONTEXT_SETTERS: dict[str, Callable[[Any, str], Any] | None] = {
    **TurnContext._checks,
    **dict.fromkeys(TurnContext._notes),
}


def _role(value: object, what: str) -> str:
    if (value != "user" and value != "assistant") or type(value) is not str:
        raise ValueError(f"{what} must be 'user' or 'assistant', not {value!r:.40}")
    return value


def _aware(value: object, what: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, not {value!r:.40}")
    return value


class DialogueMessage(_Plain):
    """One message of a turn: the user's or the bot's. Immutable."""

    __slots__ = ()
    role: Literal["user", "assistant"]
    content: str
    author_id: int | None
    speaker_name: str
    # The Discord message it was (the user's message, the bot's reply once sent), so that
    # deleting or editing it on Discord reaches the memory; None when not known.
    message_id: int | None
    # Epoch seconds; ``timestamp`` is made from it when first read, so that a message
    # built without one (every host's) costs a clock read, not a datetime. ``_given``:
    # the host gave the timestamp; a message without one is stamped by the memory's
    # clock when captured (``ShortTermMemory.capture``), as everything it stores is.
    _epoch: float
    _timestamp: datetime | None
    _given: bool

    _checks: ClassVar[dict[str, Callable[[Any, str], Any]]] = {
        "role": _role,
        "content": _text,
        "author_id": _optional_id,
        "speaker_name": _name,
        "timestamp": _aware,
        "message_id": _optional_id,
    }
    _frozen: ClassVar[bool] = True

    def __init__(
        self,
        *,
        role: Literal["user", "assistant"],
        content: str,
        author_id: int | None = None,
        speaker_name: str = "",
        timestamp: datetime | None = None,
        message_id: int | None = None,
        **unknown: object,
    ) -> None:
        if unknown:
            raise _unknown(DialogueMessage, unknown)
        if message_id is not None and (
            type(message_id) is not int or not 0 <= message_id < ID_LIMIT
        ):
            _id(message_id, "message_id")
        if (role != "user" and role != "assistant") or type(role) is not str:
            _role(role, "role")
        if type(content) is not str:
            content = _text(content, "content")
        if author_id is not None and (type(author_id) is not int or not 0 <= author_id < ID_LIMIT):
            _id(author_id, "author_id")
        if not (
            type(speaker_name) is str
            and len(speaker_name) <= MAX_NAME_LENGTH
            and speaker_name.isascii()
            and speaker_name.isprintable()
        ):
            speaker_name = _name(speaker_name, "speaker_name")
        # A host's messages rarely carry a timestamp: the clock is read, no datetime made.
        epoch = _now() if timestamp is None else _aware(timestamp, "timestamp").timestamp()
        _set(
            self,
            "__dict__",
            {
                "role": role,
                "content": content,
                "author_id": author_id,
                "speaker_name": speaker_name,
                "message_id": message_id,
                "_epoch": epoch,
                "_timestamp": timestamp,
                "_given": timestamp is not None,
            },
        )

    @property
    def timestamp(self) -> datetime:
        """When the message was said: an aware UTC datetime (by default, when it was built)."""
        made = self._timestamp
        if made is None:
            made = datetime.fromtimestamp(self._epoch, UTC)
            self.__dict__["_timestamp"] = made
        return made

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with the fields in ``update`` changed and checked."""
        del deep
        return DialogueMessage(**{**self.model_dump(), **(update or {})})

    def __hash__(self) -> int:
        return hash(tuple(self.model_dump().values()))


def _context(value: object, what: str) -> TurnContext:
    if type(value) is TurnContext:
        return value
    if isinstance(value, TurnContext):
        return value
    if isinstance(value, dict):
        return TurnContext(**value)
    raise ValueError(f"{what} must be a TurnContext, not {type(value).__name__}")


def _message(value: object, what: str) -> DialogueMessage:
    if isinstance(value, DialogueMessage):
        return value
    if isinstance(value, dict):
        return DialogueMessage(**value)
    raise ValueError(f"{what} must hold DialogueMessages, not {type(value).__name__}")


def _messages(value: object, what: str) -> list[DialogueMessage]:
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list of DialogueMessage, not {type(value).__name__}")
    return [_message(item, what) for item in value]


class GenerationFinished(_Plain):
    """The event a host dispatches after it answered: the turn's messages and how it ended."""

    __slots__ = ()
    context: TurnContext
    messages: list[DialogueMessage]
    stopped: bool

    _checks: ClassVar[dict[str, Callable[[Any, str], Any]]] = {
        "context": _context,
        "messages": _messages,
        "stopped": _flag,
    }

    def __init__(
        self,
        *,
        context: TurnContext,
        messages: list[DialogueMessage],
        stopped: bool = False,
        **unknown: object,
    ) -> None:
        if unknown:
            raise _unknown(GenerationFinished, unknown)
        if type(context) is not TurnContext:
            context = _context(context, "context")
        if type(stopped) is not bool:
            _flag(stopped, "stopped")
        # A list of its own, as the model made: the host's list may be reused.
        if type(messages) is list:
            messages = list(messages)
            for item in messages:
                if type(item) is not DialogueMessage:
                    messages = _messages(messages, "messages")
                    break
        else:
            messages = _messages(messages, "messages")
        _set(self, "__dict__", {"context": context, "messages": messages, "stopped": stopped})
