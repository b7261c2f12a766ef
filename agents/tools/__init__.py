"""Tools: the registry and the built-in memory tools (imported here so they register)."""

from agents.tools import (
    base_tools,
    call_tools,
    file_tools,
    memory_tools,
    multi_agent,
    search_tools,
)
from agents.tools.registry import PRE_EXEC_MSG, REGISTRY, Tool, ToolContext, ToolError

BASE_TOOLS = [
    "search_memory",
    "archival_memory_search",
    "archival_memory_insert",
    "conversation_search",
    "core_memory_append",
    "core_memory_replace",
]
SLEEPTIME_TOOLS = [
    "memory_rethink",
    "memory_replace",
    "memory_insert",
    "memory_finish_edits",
    "archival_memory_insert",
]

__all__ = [
    "BASE_TOOLS",
    "PRE_EXEC_MSG",
    "REGISTRY",
    "SLEEPTIME_TOOLS",
    "Tool",
    "ToolContext",
    "ToolError",
    "base_tools",
    "call_tools",
    "file_tools",
    "memory_tools",
    "multi_agent",
    "search_tools",
]
