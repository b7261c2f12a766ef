"""Letta's base tool `send_message` (for clients that attach it: it answers and ends the turn),
and the Letta tool type of each built-in tool (how Letta's clients tell tool sets apart)."""

from __future__ import annotations

from agents.tools.registry import REGISTRY, ToolContext

LETTA_TOOL_TYPES = {
    "send_message": "letta_core",
    "conversation_search": "letta_core",
    "archival_memory_insert": "letta_core",
    "archival_memory_search": "letta_core",
    "search_memory": "letta_core",
    "core_memory_append": "letta_memory_core",
    "core_memory_replace": "letta_memory_core",
    "memory_insert": "letta_memory_core",
    "memory_replace": "letta_memory_core",
    "memory_rethink": "letta_sleeptime_core",
    "memory_finish_edits": "letta_sleeptime_core",
    "send_message_to_agent_and_wait_for_reply": "letta_multi_agent_core",
    "send_message_to_agents_matching_tags": "letta_multi_agent_core",
    "send_message_to_agent_async": "letta_multi_agent_core",
    "open_files": "letta_files_core",
    "grep_files": "letta_files_core",
    "semantic_search_files": "letta_files_core",
}


@REGISTRY.register(ends_turn=True)
async def send_message(ctx: ToolContext, message: str) -> str:
    """Sends a message to the human user.

    Args:
        message: Message contents. All unicode (including emojis) are supported.
    """
    return "Sent message successfully."
