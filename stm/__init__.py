"""Short-term memory for LLM chat bots: capture, summary upgrade, context and deletion.

Framework-free: it takes plain ids and messages and returns plain values.
"""

from .audience import Audience
from .budget import TokenCounter, estimate_tokens
from .config import STMConfig
from .errors import (
    ConfigError,
    DurabilityError,
    InvalidInput,
    NoDatabase,
    RejectedWriteError,
    SchemaVersionError,
    STMError,
    StoreError,
)
from .exchange import exchange
from .intent import IntentGate
from .memory import MemoryTool, ShortTermMemory
from .models import (
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
from .placement import place
from .purgewatch import PurgeAlert, RecentPurges
from .tool.forms import TOOL_APIS, convert_tool_definition
from .tools import Tool, ToolRegistry

__all__ = [
    "TOOL_APIS",
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
    "NoDatabase",
    "Omission",
    "PromptBlock",
    "PromptContext",
    "PurgeAlert",
    "PurgeImpact",
    "RecentPurges",
    "RejectedWriteError",
    "STMConfig",
    "STMError",
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
]
