"""The offline demo model: deterministic, tool-using, honest about what it is."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agents.llm.base import LLMChunk, LLMProvider, LLMRequest, ToolCallDelta, Usage
from agents.llm.facts import extract_facts, lookup, merge_facts

DEMO = "I'm the offline demo model"
FILLER = "Let me double-check my notes—one moment."
_RECALL = re.compile(
    r"\b(remember|recall|did i (tell|say|mention)|what did i|do you know|what do you know|"
    r"what was|have i told)\b",
    re.I,
)
_GREETING = re.compile(r"^\s*(hi|hello|hey|good (morning|afternoon|evening)|howdy)\b", re.I)
_STORY = re.compile(r"\b(story|long answer|tell me everything|count to)\b", re.I)
_STOP = {
    "the",
    "a",
    "an",
    "my",
    "i",
    "you",
    "me",
    "what",
    "did",
    "do",
    "about",
    "remember",
    "recall",
    "tell",
    "that",
    "is",
    "was",
    "of",
    "to",
    "and",
    "your",
    "know",
    "have",
    "it",
}


def block_value(system: str, label: str) -> str:
    m = re.search(rf"<{label}>.*?<value>\n?(.*?)\n?</value>", system, re.S)
    return m.group(1).strip() if m else ""


def _tool_names(req: LLMRequest) -> set[str]:
    return {t["function"]["name"] for t in req.tools}


def _voice(req: LLMRequest) -> bool:
    return any("pre_exec_msg" in t["function"]["parameters"]["properties"] for t in req.tools)


class ScriptedProvider(LLMProvider):
    """Deterministic replies: greets by name, answers from blocks, recalls with tools."""

    name = "scripted"

    async def models(self) -> list[str]:
        return ["demo"]

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        text, calls = self.decide(req)
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in req.messages) // 4
        completion = 0
        for piece in re.findall(r"\S+\s*", text):
            completion += 1
            yield LLMChunk(text=piece)
        for index, (name, args) in enumerate(calls):
            raw = json.dumps(args)
            cut = [0, min(len(raw), 24), min(len(raw), 48), len(raw)]
            yield LLMChunk(tool_calls=[ToolCallDelta(index, f"call_{index}_{name}", name, "")])
            for a, b in itertools.pairwise(cut):
                if b > a:
                    yield LLMChunk(tool_calls=[ToolCallDelta(index, arguments=raw[a:b])])
            completion += len(raw) // 4
        yield LLMChunk(
            usage=Usage(prompt_tokens, completion),
            finish_reason="tool_calls" if calls else "stop",
        )

    def decide(self, req: LLMRequest) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        system = str(req.messages[0].get("content") or "") if req.messages else ""
        if req.purpose == "summarize":
            return self._summary(req), []
        last = req.messages[-1] if req.messages else {"role": "user", "content": ""}
        tools = _tool_names(req)
        if "memory_finish_edits" in tools:
            return self._sleeptime(req, system, last)
        if last.get("role") == "tool":
            return self._answer_from_tool(last), []
        user = str(last.get("content") or "")
        human = block_value(system, "human")
        return self._chat(user, human, tools, _voice(req))

    def _chat(
        self, user: str, human: str, tools: set[str], voice: bool
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        name = dict(line.split(":", 1) for line in human.split("\n") if ":" in line).get("Name", "")
        name = name.strip()
        stated = extract_facts(user)
        if "Name" in stated:  # "Hi, my name is Alice": the name matters more than the "hi"
            return f"Nice to meet you, {stated['Name']}! I'll remember that. {DEMO}.", []
        if _GREETING.search(user):
            who = f", {name}" if name else ""
            return f"Hello{who}! {DEMO}, running without a language model. How can I help?", []
        found = lookup(user, human)
        if found:
            key, value = found
            return f"Your {key} is {value}.", []
        if (_RECALL.search(user) and "?" in user) or re.search(r"\bdo you remember\b", user, re.I):
            return self._recall(user, tools, voice)
        if _STORY.search(user):
            story = " ".join(
                f"This is sentence number {i} of a long story from the offline demo model."
                for i in range(1, 13)
            )
            return story, []
        if stated:
            return f"Thanks, I'll remember that. {DEMO}, so my answers are simple.", []
        heard = user.strip().rstrip(".!?")
        return f'{DEMO}. I heard you say: "{heard}".', []

    def _recall(
        self, user: str, tools: set[str], voice: bool
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        words = [w for w in re.findall(r"[a-z']+", user.lower()) if w not in _STOP and len(w) > 2]
        args: dict[str, Any] = {}
        if voice:
            args["pre_exec_msg"] = FILLER
        if "search_memory" in tools:
            args["convo_keyword_queries"] = words[:3]
            return "", [("search_memory", args)]
        if "archival_memory_search" in tools:
            args["query"] = user
            return "", [("archival_memory_search", args)]
        if "conversation_search" in tools and words:
            args["query"] = words[0]
            return "", [("conversation_search", args)]
        return f"{DEMO} and I have no memory tools here, so I can't look that up.", []

    def _answer_from_tool(self, msg: dict[str, Any]) -> str:
        try:
            data = json.loads(str(msg.get("content") or ""))
        except json.JSONDecodeError:
            return f"Done. {str(msg.get('content'))[:200]}"
        found: list[str] = []
        if isinstance(data, dict):
            found += [r["content"] for r in data.get("archival_search_results", [])]
            for texts in data.get("convo_keyword_search_results", {}).values():
                found += [t for t in texts if not t.rstrip().endswith("?")]
        elif isinstance(data, list):
            found += [r.get("content", "") for r in data if isinstance(r, dict)]
        found = [f for f in found if f]
        if not found:
            return "I couldn't find anything about that in my notes."
        return f"From my notes: {found[0][:300]}"

    def _summary(self, req: LLMRequest) -> str:
        lines = []
        for m in req.messages[1:]:
            content = str(m.get("content") or "").strip()
            if m.get("role") in ("user", "assistant") and content:
                first = re.split(r"(?<=[.!?])\s", content, maxsplit=1)[0]
                lines.append(f"{m['role']}: {first[:120]}")
        return "Summary of earlier conversation:\n" + "\n".join(lines[-40:])

    def _sleeptime(
        self, req: LLMRequest, system: str, last: dict[str, Any]
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """Archive the transcript and fold stated facts into `human`; finish after the tool
        results come back."""
        if last.get("role") == "tool":
            return "Memory is up to date.", [("memory_finish_edits", {})]
        transcript = str(last.get("content") or "").split("Transcript:", 1)[-1].strip()
        said = " ".join(
            ln.split(":", 1)[1] for ln in transcript.split("\n") if ln.lower().startswith("user:")
        )
        calls: list[tuple[str, dict[str, Any]]] = []
        if transcript:
            calls.append(("archival_memory_insert", {"content": transcript[:2000]}))
        human = block_value(system, "human")
        merged = merge_facts(human, extract_facts(said))
        if merged != human:
            calls.append(("memory_rethink", {"label": "human", "new_memory": merged}))
        return "", calls or [("memory_finish_edits", {})]
