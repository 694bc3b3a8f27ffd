"""Short-term memory for LLM chat bots: capture, summary upgrade, context and deletion.

Framework-free: it takes plain ids and messages and returns plain values.

What a host may rely on is what this module exports in ``__all__``, and the public
modules ``stm.testing`` (test doubles), ``stm.store`` (the ``Store`` protocol and
``open_store``), ``stm.prometheus`` and ``stm.cli`` (the operator's command line). Every
module whose name starts with an underscore is internal and may change in any release.
"""

from ._audience import Audience
from ._budget import TokenCounter, estimate_tokens
from ._config import STMConfig
from ._errors import (
    ConfigError,
    DurabilityError,
    InvalidInput,
    NoDatabase,
    RejectedWriteError,
    SchemaVersionError,
    STMError,
    StoreError,
)
from ._exchange import exchange
from ._intent import IntentGate
from ._keys import server_key, user_key
from ._memory import MemoryTool, ShortTermMemory
from ._metrics import MetricsSnapshot
from ._models import (
    Category,
    DialogueMessage,
    GenerationFinished,
    MemoryEntry,
    Omission,
    PromptBlock,
    PromptContext,
    PurgeImpact,
    ServerSettings,
    ToolResult,
    TurnContext,
)
from ._placement import place
from ._purgewatch import PurgeAlert, RecentPurges
from ._redact import redact_url
from ._timing import Scheduler
from ._tool import TOOL_NAME
from ._tool.forms import TOOL_APIS, convert_tool_definition
from ._tools import Tool, ToolRegistry
from .store import NoteVersion

__all__ = [
    "TOOL_APIS",
    "TOOL_NAME",
    "Audience",
    "Category",
    "ConfigError",
    "DialogueMessage",
    "DurabilityError",
    "GenerationFinished",
    "IntentGate",
    "InvalidInput",
    "MemoryEntry",
    "MemoryTool",
    "MetricsSnapshot",
    "NoDatabase",
    "NoteVersion",
    "Omission",
    "PromptBlock",
    "PromptContext",
    "PurgeAlert",
    "PurgeImpact",
    "RecentPurges",
    "RejectedWriteError",
    "STMConfig",
    "STMError",
    "Scheduler",
    "SchemaVersionError",
    "ServerSettings",
    "ShortTermMemory",
    "StoreError",
    "TokenCounter",
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "TurnContext",
    "convert_tool_definition",
    "estimate_tokens",
    "exchange",
    "place",
    "redact_url",
    "server_key",
    "user_key",
]
