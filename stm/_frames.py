"""The text the model reads around memory, in the server's language (pure).

Frames, sub-headers, relative times, the nudge and the tool's descriptions come
from one JSON catalogue per language in ``locales/`` (``en.json``, ``ja.json``),
which translators edit without touching code. A frame line opens with ``[`` and
closes with ``]`` and holds no other bracket, in every language: memory text
inside it is neutralized so that nothing else can (``_render.py``).

The language of a turn is the server's ``language`` setting, else the server's
preferred locale as Discord gives it (``TurnContext.server_locale``), else
English.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from ._models import ServerSettings

__all__ = ["DEFAULT_LANGUAGE", "LANGUAGES", "Frames", "frames_for", "model_language"]

DEFAULT_LANGUAGE = "en"
LANGUAGES = ("en", "ja")


class Frames:
    """The model-facing texts of one language: ``frames.text("same_end")``."""

    __slots__ = ("_texts", "language")

    def __init__(self, language: str, texts: dict[str, str]) -> None:
        self.language = language
        self._texts = texts

    def text(self, key: str, /, **values: object) -> str:
        """The catalogue's ``key``, filled with ``values``."""
        template = self._texts[key]
        return template.format(**values) if values else template

    def count(self, key: str, n: int, /, **values: object) -> str:
        """The ``key.one`` or ``key.other`` form for ``n``."""
        return self.text(f"{key}.{'one' if n == 1 else 'other'}", n=n, **values)

    def __repr__(self) -> str:
        return f"Frames({self.language!r})"


@functools.cache
def frames_for(language: str) -> Frames:
    """The frames of a shipped language (English for any other)."""
    if language not in LANGUAGES:
        language = DEFAULT_LANGUAGE
    raw = resources.files(__package__).joinpath("locales", f"{language}.json").read_text("utf-8")
    texts = json.loads(raw)
    texts.pop("language", None)
    return Frames(language, texts)


def _from_locale(locale: str | None) -> str:
    base = (locale or "").split("-")[0].lower()
    return base if base in LANGUAGES else DEFAULT_LANGUAGE


@functools.lru_cache(maxsize=64)
def _language(chosen: str | None, locale: str | None) -> Frames:
    return frames_for(chosen if chosen is not None else _from_locale(locale))


def model_language(settings: ServerSettings, server_locale: str | None) -> Frames:
    """The frames of a turn: the server's chosen language, else its preferred locale's
    (when a shipped language), else English."""
    return _language(settings.language, server_locale)
