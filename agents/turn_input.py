"""What the agent loop is asked (`TurnInput`: one run's input, from a REST message, a voice
turn, a chat completion or a sleeptime pass) and how it is set up (`LoopConfig`), apart from
the loop itself (agents/loop.py), which every caller of the loop imports these with."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.approvals import Answer, ClientTool
from agents.context import TEXT, Mode
from agents.tools.call_control import CallControl
from agents.tools.sandbox import SandboxConfig
from agents.tools.staging import StagedMemory
from memory.models import Source


@dataclass(slots=True)
class LoopConfig:
    max_steps: int = 6
    context_token_budget: int = 6000
    tool_timeout_s: float = 30.0
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)  # custom tools


@dataclass(slots=True)
class TurnInput:
    text: str
    mode: Mode = TEXT
    conversation_id: str | None = None  # None: the agent's default conversation
    identity_id: str | None = None  # runs that store nothing (sleeptime): whose blocks to see
    turn_id: str | None = None
    source: Source = "text"
    notes: list[str] = field(default_factory=list)  # e.g. "caller pressed 1"
    publish: bool = True  # write the finished turn to the transcript outbox
    source_event_id: str | None = None
    max_steps: int | None = None
    model: str | None = None  # a model handle other than the agent's (sleeptime may use its own)
    staged: StagedMemory | None = None  # sleeptime: stage memory edits, the caller commits them
    llm_timeout_s: float | None = None  # voice: a short wait for the model (LLMRequest.timeout_s)
    record: bool | None = None  # keep a run record (None: when the mode stores messages)
    otid: str | None = None  # the client's offline threading id of the input message
    # answers to the conversation's waiting calls (agents/approvals.py); with them the run
    # starts by running (or refusing) those calls, and `text` is not a message
    answers: list[Answer] | None = None
    answers_only: bool = False  # store the answers' results, then stop (a call that hung up)
    client_tools: list[ClientTool] = field(default_factory=list)
    call: CallControl | None = None  # the live call of a voice turn: its call tools are offered
