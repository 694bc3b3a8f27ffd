"""Per-server settings and per-user opt-outs, held in memory for the turn path.

A server's stored settings hold only the fields its admins set (``own``): every other
field is the operator's default (``STMConfig``: ``STM_RENDER_MODE`` and the others),
read when the settings are loaded, so a new operator default reaches every server that
did not set that field. Rows written whole by earlier versions load as if the admins
had set every field they hold (a stored value cannot tell a choice from the default of
its day): they keep their values, as before, until changed or reset.

Validation lives here; saving them is the facade's job (through the writer's shared
changes): a change made here is in force here at once (``stage``), and stays so over
every reload of what the store holds until the store has it.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import ValidationError

from ._config import SERVER_DEFAULTS, STMConfig
from ._errors import InvalidInput
from ._ids import check_id
from ._models import DEFAULT_CATEGORY, Category, ServerSettings
from ._slugs import slugify

__all__ = ["SettingsBook", "invalid_input"]

_V = TypeVar("_V")

log = logging.getLogger("stm.settings")


def invalid_input(exc: ValidationError) -> InvalidInput:
    """``exc`` in words for the person who chose the value: field and rule, no links."""
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "value"
        problems.append(f"{field.replace('_', ' ')}: {error['msg']}")
    return InvalidInput("; ".join(problems) or "that value is not valid")


def _readable(
    server_id: int, base: dict[str, Any], known: dict[str, Any], unread: dict[str, Any]
) -> ServerSettings:
    """The settings of ``known`` fields over ``base`` (the defaults); a field whose value
    this version cannot read (a newer one's language, say) gets its default and its value
    goes to ``unread``, so that one such value does not put the server's other settings
    (``enabled`` among them) back to the defaults."""
    while True:
        try:
            return ServerSettings.model_validate_json(json.dumps({**base, **known}))
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]} & known.keys()
            if not bad:
                raise
            log.warning("server %s: ignoring the settings %s: %s", server_id, sorted(bad), exc)
            for name in bad:
                unread[name] = known.pop(name)


class SettingsBook:
    """Every configured server's settings, the defaults for the others, and opt-outs."""

    def __init__(self, config: STMConfig) -> None:
        self.max_categories = config.max_categories
        self.defaults = ServerSettings(**{name: getattr(config, name) for name in SERVER_DEFAULTS})
        self._defaults_json: dict[str, Any] = json.loads(self.defaults.model_dump_json())
        self._servers: dict[int, ServerSettings] = {}
        # Per server, the fields its admins set (the rest follow the defaults).
        self._own: dict[int, frozenset[str]] = {}
        # Per server, the stored fields a newer version of the library wrote.
        self._newer: dict[int, dict[str, Any]] = {}
        # Per server, what this version read a stored value it could not read as (its
        # default): while a field still holds that, the stored value is written back.
        self._read_as: dict[int, dict[str, Any]] = {}
        self._opted_out: set[int] = set()
        # Changes made here that the store has not committed yet, by server (None: the
        # server's settings deleted) and by user, each with the token of the change that
        # made it: a reload of what the store holds must not undo them (``load``).
        self._staged: dict[int, tuple[int, tuple[ServerSettings, frozenset[str]] | None]] = {}
        self._staged_opt_outs: dict[int, tuple[int, bool]] = {}
        self._tokens = itertools.count(1)

    def load(self, stored: dict[int, str], opted_out: set[int]) -> None:
        """Take what the store holds (a server it no longer holds gets the defaults again);
        settings that are not a JSON object fall back to the defaults, a value this version
        cannot read to that field's default."""
        self._servers, self._own, self._newer, self._read_as = {}, {}, {}, {}
        for server_id, raw in stored.items():
            self.load_one(server_id, raw)
        self._opted_out = set(opted_out)
        # What this process changed and the store does not hold yet stays in force.
        for server_id, (_, staged) in self._staged.items():
            self._put(server_id, staged)
        for user_id, (_, opted) in self._staged_opt_outs.items():
            self._put_opt_out(user_id, opted)

    def load_one(self, server_id: int, raw: str) -> None:
        """Take one server's settings as the store keeps them (``stored_form``); unreadable
        ones are logged and leave what is in force."""
        try:
            fields = json.loads(raw)
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            # Fields this version does not know were written by a newer one, which
            # shares the database: kept aside and written back with any change here,
            # so that neither version loses the other's settings.
            unknown = {k: v for k, v in fields.items() if k not in ServerSettings.model_fields}
            known = {k: v for k, v in fields.items() if k not in unknown}
            settings = _readable(server_id, self._defaults_json, known, unknown)
        except (ValidationError, ValueError) as exc:
            log.warning("ignoring unreadable settings of server %s: %s", server_id, exc)
            return
        self._servers[server_id] = settings
        self._own[server_id] = frozenset(known)
        self._newer.pop(server_id, None)
        self._read_as.pop(server_id, None)
        if unknown:
            self._newer[server_id] = unknown
            read = json.loads(settings.model_dump_json())
            unread = {k: read[k] for k in unknown if k in ServerSettings.model_fields}
            if unread:
                self._read_as[server_id] = unread

    def own(self, server_id: int) -> frozenset[str]:
        """The fields the server's admins set (stored; the others are the defaults)."""
        return self._own.get(server_id, frozenset())

    def stored_form(self, server_id: int, settings: ServerSettings, own: frozenset[str]) -> str:
        """The fields ``own`` of ``settings`` as the store keeps them, with the fields a
        newer version wrote."""
        fields = {k: v for k, v in json.loads(settings.model_dump_json()).items() if k in own}
        kept = self._newer.get(server_id, {})
        stored = {**kept, **fields}
        for name, value in self._read_as.get(server_id, {}).items():
            if fields.get(name) == value:  # not changed here since: the stored value stays
                stored[name] = kept[name]
        return json.dumps(stored)

    def drop(self, server_id: int) -> None:
        """The server's settings were deleted: the defaults are in force again."""
        self._servers.pop(server_id, None)
        self._own.pop(server_id, None)
        self._newer.pop(server_id, None)
        self._read_as.pop(server_id, None)

    def configured(self) -> list[int]:
        """The servers that have settings of their own."""
        return sorted(self._servers)

    def for_server(self, server_id: int | None) -> ServerSettings:
        """The settings in force for a server (the defaults for DMs and new servers)."""
        if server_id is None:
            return self.defaults
        return self._servers.get(server_id, self.defaults)

    def changed(self, server_id: int, **changes: Any) -> ServerSettings:
        """The server's settings with ``changes``; InvalidInput for a bad value or field."""
        if "categories" in changes:
            raise InvalidInput("change categories with set_categories()")
        current = self._configurable(server_id)
        unknown = set(changes) - set(ServerSettings.model_fields)
        if unknown:
            raise InvalidInput(f"unknown server setting(s): {', '.join(sorted(unknown))}")
        try:
            return ServerSettings.model_validate({**current.model_dump(), **changes})
        except ValidationError as exc:
            raise invalid_input(exc) from None

    def with_categories(self, server_id: int, categories: Iterable[Category]) -> ServerSettings:
        """The server's settings with these categories (none: the default ``summary``)."""
        current = self._configurable(server_id)
        if isinstance(categories, str | bytes) or not isinstance(categories, Iterable):
            raise InvalidInput(f"categories must be a list of Category, not {categories!r:.40}")
        chosen = tuple(categories)
        for category in chosen:
            if not isinstance(category, Category):
                raise InvalidInput(f"not a Category: {category!r}")
        if len(chosen) > self.max_categories:
            raise InvalidInput(
                f"at most {self.max_categories} categories per server "
                f"(got {len(chosen)}; see STM_MAX_CATEGORIES)"
            )
        # Stored values are keyed by slug. Were two labels to share one, the second would
        # get a numbered slug that changes when the first is removed, and the removed
        # category's values would then show under the other's label.
        seen: dict[str, str] = {}
        for category in chosen:
            slug = slugify(category.label)
            if slug in seen:
                raise InvalidInput(
                    f"categories {seen[slug]!r} and {category.label!r} would share the tool "
                    f"field {slug!r}: give them labels that differ in letters or digits"
                )
            seen[slug] = category.label
        return current.model_copy(update={"categories": chosen or (DEFAULT_CATEGORY,)})

    def _configurable(self, server_id: int | None) -> ServerSettings:
        if server_id is None:
            raise InvalidInput("server settings need a server id (DMs use the global defaults)")
        return self.for_server(check_id(server_id, "server_id"))

    def stage(
        self, server_id: int, settings: ServerSettings | None, own: frozenset[str] = frozenset()
    ) -> Callable[[object], None]:
        """Put a change made here in force at once (None: the server's settings deleted;
        ``own``: the fields its admins set), kept over every reload until the store has
        it; returns what to call once it is committed."""
        value = None if settings is None else (settings, own)
        return self._stage(self._staged, server_id, value, self._put)

    def stage_opt_out(self, user_id: int, opted_out: bool) -> Callable[[object], None]:
        """``stage`` for a user's opt-out (or its end)."""
        return self._stage(self._staged_opt_outs, user_id, opted_out, self._put_opt_out)

    def _stage(
        self,
        staged: dict[int, tuple[int, _V]],
        key: int,
        value: _V,
        put: Callable[[int, _V], None],
    ) -> Callable[[object], None]:
        token = next(self._tokens)
        staged[key] = (token, value)
        put(key, value)

        def committed(_result: object = None) -> None:
            # A later change of the same key stays staged until its own commit.
            if key in staged and staged[key][0] == token:
                del staged[key]

        return committed

    def _put(self, server_id: int, value: tuple[ServerSettings, frozenset[str]] | None) -> None:
        if value is None:
            self.drop(server_id)
        else:
            self._servers[server_id], self._own[server_id] = value

    def is_opted_out(self, user_id: int) -> bool:
        """True while the user asked not to be remembered."""
        return user_id in self._opted_out

    def _put_opt_out(self, user_id: int, opted_out: bool) -> None:
        if opted_out:
            self._opted_out.add(user_id)
        else:
            self._opted_out.discard(user_id)
