"""An open file's window (Letta's "[Viewing ...]" header over numbered lines, cut at the
agent's character limit) and the prompt's `<directories>`: text turns show the windows, voice
turns the names and states only."""

from __future__ import annotations

from datetime import UTC, datetime

from agents.context import TEXT, PromptCache
from agents.voice import VOICE
from memory.models import AgentData, BlockData, FolderView
from memory.open_files import window

LINES = "alpha\nbeta\ngamma\ndelta\n"


def test_a_window_says_what_it_shows() -> None:
    assert window(LINES) == (
        "[Viewing file start (out of 4 lines)]\n1: alpha\n2: beta\n3: gamma\n4: delta",
        1,
        4,
    )
    assert window(LINES, 1, 2) == (
        "[Viewing lines 2 to 3 (out of 4 lines)]\n2: beta\n3: gamma",
        2,
        3,
    )
    assert window(LINES, 2)[0] == "[Viewing lines 3 to end (out of 4 lines)]\n3: gamma\n4: delta"
    # cut at the limit, whole lines; at least one line even when it alone is over the limit
    assert window(LINES, chars=50)[0] == "[Viewing file start (out of 4 lines)]\n1: alpha"
    assert window("x" * 100, chars=45) == ("[Viewing file start (out of 1 lines)]\n1: xxxx", 1, 1)
    assert window(LINES, 99, 3)[1:] == (4, 4)  # an offset past the end shows the last line


def _agent() -> AgentData:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    shown = BlockData(
        id="block-1", agent_id="agent-1", scope="file", label="kb/open.txt", file_id="file-1",
        value="[Viewing file start (out of 1 lines)]\n1: the secret recipe", limit=60,
        read_only=True,
    )  # fmt: skip
    return AgentData(
        id="agent-1", name="a", system="sys", model="openai/fake", embedding="", created_at=now,
        updated_at=now, blocks=[shown], metadata={"max_files_open": 3},
        folders=[FolderView(id="source-1", name="kb", files=[("file-1", "open.txt"),
                                                             ("file-2", "shut.txt")])],
    )  # fmt: skip


def test_text_prompts_show_open_files_and_voice_prompts_only_name_them() -> None:
    cache = PromptCache()
    text = cache.get(_agent(), TEXT)
    assert "<file_limits>\n- current_files_open=1\n- max_files_open=3\n</file_limits>" in text
    assert '<file status="open" name="kb/open.txt">\n<metadata>' in text
    assert "1: the secret recipe" in text
    assert '<file status="closed" name="kb/shut.txt">\n</file>' in text
    voice = cache.get(_agent(), VOICE)
    assert '<file status="open" name="kb/open.txt">\n</file>' in voice
    assert "secret recipe" not in voice and '<file status="closed" name="kb/shut.txt">' in voice
    assert "<directories>" not in cache.get(_agent().model_copy(update={"folders": []}), TEXT)
