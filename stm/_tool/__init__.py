"""The ``update_short_term_memory`` tool: its name, and where the rest of it lives.

``schema`` builds the tool's JSON schema and parses what the model sends (pure);
``upgrade`` is ``MemoryTool`` and the upgrade transaction behind it (blocking
rules, the guards against deletions during the turn, snapshot and rollback).
This module only names the tool, so that the renderer can mention it without
importing the tool's machinery.
"""

from __future__ import annotations

__all__ = ["TOOL_NAME"]

TOOL_NAME = "update_short_term_memory"
