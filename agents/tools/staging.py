"""Memory edits staged by a sleeptime run instead of written at once. The sleeptime agent
commits them at the end of the run, in one transaction with the record of the transcript
event, so a run is applied entirely and exactly once or not at all."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from memory.models import BlockData

# Versions of staged blocks: unique, and far above any stored version, so a compiled prompt
# cached for a staged value is never mistaken for the stored block (the cache keys on versions).
_LOCAL_VERSIONS = itertools.count(1 << 40)


@dataclass
class StagedMemory:
    original: dict[str, str] = field(default_factory=dict)  # label -> value at the run's start
    base: dict[str, int] = field(default_factory=dict)  # label -> version the run started from
    ids: dict[str, str] = field(default_factory=dict)  # label -> the block's id
    blocks: dict[str, str] = field(default_factory=dict)  # label -> new value
    passages: list[tuple[str, list[str]]] = field(default_factory=list)  # (text, tags)

    def edit(self, block: BlockData, value: str) -> BlockData:
        """Stage a new value; returns the block as the run now sees it (under a local version,
        so the loop recompiles its prompt)."""
        self.base.setdefault(block.label, block.version)
        self.ids.setdefault(block.label, block.id)
        self.blocks[block.label] = value
        return block.model_copy(update={"value": value, "version": next(_LOCAL_VERSIONS)})

    def archive(self, text: str, tags: list[str]) -> bool:
        """Stage a passage; False if this run already staged the same text."""
        if any(t == text for t, _ in self.passages):
            return False
        self.passages.append((text, tags))
        return True
