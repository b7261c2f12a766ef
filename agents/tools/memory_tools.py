"""Built-in core-memory editing tools (not voice-safe: editing is the sleeptime worker's job)."""

from __future__ import annotations

from collections.abc import Callable

from agents.tools.registry import REGISTRY, ToolContext, ToolError
from memory.models import Conflict, LimitExceeded, NotFound

CHANGED_MEANWHILE = "changed while you were editing"  # a rewrite lost a race; redo it


async def _edit(
    ctx: ToolContext, label: str, edit: Callable[[str], str], *, rewrite: bool = False
) -> str:
    """Apply `edit` to a block. A small edit is re-applied to the newest value if another
    writer won meanwhile; a whole `rewrite` was based on the version the model saw, so a
    newer version makes it fail (the model gets the current value and redoes it)."""
    block = next((b for b in ctx.agent.blocks if b.label == label), None)
    if block is None:
        known = ", ".join(b.label for b in ctx.agent.blocks) or "none"
        raise ToolError(f"no memory block '{label}' (blocks: {known})")
    if block.read_only:
        raise ToolError(f"memory block '{label}' is read-only")
    if ctx.identity_id is not None and block.identity_id != ctx.identity_id:
        # one caller's words never land in memory that other callers see
        raise ToolError(f"memory block '{label}' is shared by every caller; it is read-only here")
    if ctx.actor == "sleeptime" and label != "human" and not block.sleeptime_editable:
        raise ToolError(f"memory block '{label}' is not editable by the sleeptime agent")
    if ctx.staged is not None:  # a sleeptime run: committed with the run, all or nothing
        value = edit(block.value)
        if len(value) > block.limit:
            raise ToolError(
                f"block '{label}' value would be {len(value)} chars, limit {block.limit}"
            )
        staged = ctx.staged.edit(block, value)
        ctx.agent.blocks = [staged if b.label == label else b for b in ctx.agent.blocks]
        return f"The '{label}' block now reads:\n{value}"
    try:
        new = await ctx.memory.blocks.modify(
            ctx.agent.id,
            label,
            edit,
            actor="sleeptime" if ctx.actor == "sleeptime" else "agent",
            expected_version=block.version if rewrite else None,
            identity_id=ctx.identity_id,
        )
    except (LimitExceeded, NotFound) as exc:
        raise ToolError(str(exc)) from exc
    except Conflict as exc:
        fresh = await ctx.memory.blocks.get(ctx.agent.id, label, ctx.identity_id)
        ctx.agent.blocks = [fresh if b.label == label else b for b in ctx.agent.blocks]
        raise ToolError(
            f"memory block '{label}' {CHANGED_MEANWHILE} (now version {fresh.version}); it "
            f"now reads:\n{fresh.value}\nApply your changes to this version again."
        ) from exc
    ctx.agent.blocks = [new if b.label == label else b for b in ctx.agent.blocks]
    return f"The '{label}' block now reads (version {new.version}):\n{new.value}"


def _replace_once(old: str, new: str, label: str) -> Callable[[str], str]:
    def edit(value: str) -> str:
        count = value.count(old)
        if count == 0:
            raise ToolError(f"'{old}' does not appear in block '{label}'")
        if count > 1:
            raise ToolError(f"'{old}' appears {count} times in block '{label}'; be more specific")
        return value.replace(old, new, 1)

    return edit


@REGISTRY.register()
async def core_memory_append(ctx: ToolContext, label: str, content: str) -> str:
    """Append text to the end of a core memory block.

    Args:
        label: The block to edit, e.g. "human" or "persona".
        content: Text to append on a new line.
    """
    return await _edit(ctx, label, lambda v: f"{v}\n{content}" if v else content)


@REGISTRY.register()
async def core_memory_replace(
    ctx: ToolContext, label: str, old_content: str, new_content: str
) -> str:
    """Replace exact text in a core memory block.

    Args:
        label: The block to edit.
        old_content: Text that appears exactly once in the block.
        new_content: Replacement text (empty string deletes).
    """
    return await _edit(ctx, label, _replace_once(old_content, new_content, label))


@REGISTRY.register()
async def memory_insert(ctx: ToolContext, label: str, new_str: str, insert_line: int = -1) -> str:
    """Insert text at a line of a memory block.

    Args:
        label: The block to edit.
        new_str: The text to insert.
        insert_line: Line number to insert before (0 = top); -1 appends at the end.
    """

    def edit(value: str) -> str:
        lines = value.split("\n") if value else []
        pos = len(lines) if insert_line < 0 or insert_line > len(lines) else insert_line
        return "\n".join([*lines[:pos], new_str, *lines[pos:]])

    return await _edit(ctx, label, edit)


@REGISTRY.register()
async def memory_replace(ctx: ToolContext, label: str, old_str: str, new_str: str) -> str:
    """Replace a unique string in a memory block with another.

    Args:
        label: The block to edit.
        old_str: Text that appears exactly once in the block.
        new_str: Replacement text.
    """
    return await _edit(ctx, label, _replace_once(old_str, new_str, label))


@REGISTRY.register()
async def memory_rethink(ctx: ToolContext, label: str, new_memory: str) -> str:
    """Rewrite a memory block completely, integrating new facts and removing stale ones.

    Args:
        label: The block to rewrite.
        new_memory: The complete new contents of the block.
    """
    return await _edit(ctx, label, lambda _v: new_memory, rewrite=True)


@REGISTRY.register(ends_turn=True)
async def memory_finish_edits(ctx: ToolContext) -> str:
    """Call when memory editing is complete; ends the editing run."""
    ctx.finished = True
    return "Memory edits finished."
