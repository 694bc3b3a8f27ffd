"""The host's own settings from the environment, with one clear line for what is missing."""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values
from openai import AsyncOpenAI

from .models import OpenAIChatModel

__all__ = ["HOST_VARIABLES", "SettingMissing", "discord_token", "load_dotenv", "model_from_env"]

HOST_VARIABLES = ("DISCORD_TOKEN", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY")


class SettingMissing(Exception):
    """A required environment variable is not set; the message says which and how."""


def load_dotenv(path: str | Path = ".env") -> None:
    """Take the bot's own variables from ``path`` where the environment does not set them.

    The memory's ``STM_*`` settings are read from the same file by ``STMConfig``; the
    environment wins over the file for both.
    """
    if not Path(path).is_file():
        return
    for name, value in dotenv_values(path).items():
        if name in HOST_VARIABLES and value is not None and name not in os.environ:
            os.environ[name] = value


def _get(name: str) -> str:
    return os.environ.get(name, "").strip()


def discord_token() -> str:
    """``DISCORD_TOKEN``, the bot's token."""
    token = _get("DISCORD_TOKEN")
    if not token:
        raise SettingMissing(
            "DISCORD_TOKEN is not set: export your bot's token (Developer Portal > Bot > Token), "
            "or run 'python bot.py --demo' to try it without one."
        )
    return token


def model_from_env(*, required: bool = True) -> OpenAIChatModel | None:
    """The OpenAI-compatible model named by ``OPENAI_MODEL``, ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY``; None when not configured and not ``required``."""
    model, base_url, api_key = _get("OPENAI_MODEL"), _get("OPENAI_BASE_URL"), _get("OPENAI_API_KEY")
    if not model:
        if not required:
            return None
        raise SettingMissing(
            "OPENAI_MODEL is not set: name the chat model, e.g. OPENAI_MODEL=gpt-4o-mini "
            "(or llama3.1 with OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama)."
        )
    if not api_key and not base_url:
        raise SettingMissing(
            "OPENAI_API_KEY is not set: export your API key, or set OPENAI_BASE_URL to a local "
            "OpenAI-compatible server that needs none."
        )
    # Local servers (Ollama, llama.cpp, vLLM) ignore the key, but the client requires one.
    client = AsyncOpenAI(base_url=base_url or None, api_key=api_key or "not-needed")
    return OpenAIChatModel(client, model)
